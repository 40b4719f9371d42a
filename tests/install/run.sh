#!/usr/bin/env bash
# `cmake --install` of a build folder into a scratch prefix, then, using only what was installed:
# a C program built with `pkg-config --cflags --libs sbx` (shared) and `--static` (libsbx.a
# alone must be complete) runs; a DESTDIR install puts every file under DESTDIR; and, as root,
# the installed sbx runs a command in a sandbox, finding the installed sbx-init by itself.
#
#   tests/install/run.sh BUILD_DIR [EXTRA_CFLAGS]   (EXTRA_CFLAGS: e.g. a sanitizer's flags)
set -euo pipefail
B=$(realpath "$1")
CFLAGS_EXTRA=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/sbx-install.XXXXXX)
P=$W/prefix
cleanup() {
  [ -x "$P/bin/sbx" ] && "$P/bin/sbx" --home "$W/home" down >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "install: FAIL $*" >&2; exit 1; }

cmake --install "$B" --prefix "$P" >"$W/install.log" || fail "cmake --install: $(cat "$W/install.log")"
for f in bin/sbx bin/sbxd libexec/sbx/sbx-init include/sbx/sbx.h include/sbx/error.h \
  include/sbx/config.h; do
  [ -e "$P/$f" ] || fail "$f not installed"
done
pc=$(find "$P" -name sbx.pc)
[ -n "$pc" ] || fail "sbx.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
for f in libsbx.so libsbx.a; do
  [ -e "$libdir/$f" ] || fail "$f not installed in $libdir"
done

export PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(pkg-config --variable=prefix sbx)" = "$P" ] || fail "sbx.pc prefix is not $P"
read -r -a cflags <<<"$(pkg-config --cflags sbx)"
read -r -a libs <<<"$(pkg-config --libs sbx)"
# --static: libsbx.a by path (a -lsbx would pick the .so), then what it needs.
slibs=("$libdir/libsbx.a")
for a in $(pkg-config --static --libs sbx); do
  [ "$a" = -lsbx ] || slibs+=("$a")
done
read -r -a extra <<<"$CFLAGS_EXTRA"
# Not the source tree's headers: only what -I from sbx.pc gives.
cc -std=c17 -Wall -Werror ${extra[@]+"${extra[@]}"} "${cflags[@]}" "$HERE/hello.c" -o "$W/hello" "${libs[@]}"
cc -std=c17 -Wall -Werror ${extra[@]+"${extra[@]}"} "${cflags[@]}" "$HERE/hello.c" -o "$W/hello-static" \
  "${slibs[@]}"
deps=$(LD_LIBRARY_PATH=$libdir ldd "$W/hello")
grep -q "libsbx.so.0 => $libdir/" <<<"$deps" || fail "hello does not use $libdir/libsbx.so: $deps"
LD_LIBRARY_PATH=$libdir "$W/hello" >"$W/out.shared" || fail "hello (shared) exited $?"
grep -q libsbx <<<"$(ldd "$W/hello-static")" && fail "hello-static still needs libsbx.so"
"$W/hello-static" >"$W/out.static" || fail "hello (static) exited $?"
cmp -s "$W/out.shared" "$W/out.static" || fail "shared and static outputs differ"
grep -Eq '^id [0-9a-f]{16}$' "$W/out.shared" || fail "no scope id: $(cat "$W/out.shared")"
grep -qx 'bad -1 invalid' "$W/out.shared" || fail "an empty user was not refused: $(cat "$W/out.shared")"
grep -qx 'kind not_found' "$W/out.shared" || fail "kind name: $(cat "$W/out.shared")"
grep -qx 'config dumped' "$W/out.shared" || fail "config: $(cat "$W/out.shared")"
echo "install: ok   prefix install, pkg-config, shared and static link"

DESTDIR=$W/dest cmake --install "$B" >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$B/CMakeCache.txt")
[ -x "$W/dest$prefix/bin/sbx" ] || fail "DESTDIR install: no $W/dest$prefix/bin/sbx"
leaked=$(find "$W/dest" -mindepth 1 -maxdepth 1 ! -name "$(echo "$prefix" | cut -d/ -f2)")
[ -z "$leaked" ] || fail "DESTDIR install wrote outside \$DESTDIR$prefix: $leaked"
grep -q "^prefix=$prefix\$" "$W/dest$prefix${pc#"$P"}" || fail "DESTDIR sbx.pc prefix"
echo "install: ok   DESTDIR install"

if [ "$(id -u)" != 0 ]; then
  echo "install: skip running the installed sbx (needs root)"
  exit 0
fi
# No SBX_INIT, not run from the build folder: sbx must find $P/libexec/sbx/sbx-init itself.
out=$(cd / && env -u SBX_INIT "$P/bin/sbx" --home "$W/home" exec -t install -- echo from-installed) ||
  fail "the installed sbx could not run a command: $out"
[ "$out" = from-installed ] || fail "installed sbx printed: $out"
echo "install: ok   the installed sbx finds its sbx-init"
