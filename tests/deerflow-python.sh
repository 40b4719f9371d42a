#!/bin/sh
# A Python >= 3.12 with pydantic 2 for DeerFlow's code (tests/integration/test_aio_sdk.py), which
# Debian 12 (3.11, pydantic 1.10) cannot give: python3 of a Debian trixie root made by debootstrap
# from Debian's archive, run in a private mount namespace with /proc, /dev, /sys, /tmp and the
# folders in $SBX_DEERFLOW_BINDS (colon-separated: the sources and the test's files) bound in.
#
#   tests/deerflow-python.sh --setup     make the root (root, network to deb.debian.org; ~2 min)
#   SBX_DEERFLOW_PYTHON=tests/deerflow-python.sh ...   then use it as the python
#
# The root is $SBX_DEERFLOW_ROOT (default /var/cache/sbx-test/trixie-python).
set -eu
root=${SBX_DEERFLOW_ROOT:-/var/cache/sbx-test/trixie-python}
# DeerFlow's own imports (sqlalchemy), its redis ownership store, and a redis-server for it
pkgs=python3,python3-pydantic,python3-httpx,python3-requests,python3-yaml,python3-dotenv,python3-packaging,python3-sqlalchemy,python3-redis,redis-server,ca-certificates
if [ "${1-}" = --setup ]; then
  # a root made with another package list is made again
  [ "$(cat "$root/.sbx-packages" 2>/dev/null)" = "$pkgs" ] && exit 0
  mkdir -p "$(dirname "$root")"
  rm -rf "$root.tmp"
  debootstrap --variant=minbase --include="$pkgs" \
    trixie "$root.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
  echo "$pkgs" > "$root.tmp/.sbx-packages"
  rm -rf "$root"
  mv "$root.tmp" "$root"
  exit 0
fi
[ -x "$root/usr/bin/python3" ] || { echo "no trixie root in $root: run $0 --setup" >&2; exit 2; }
exec unshare -m sh -c '
  root=$1 cwd=$2; shift 2
  old=$IFS; IFS=:; set -f
  for d in /proc /dev /sys /tmp $SBX_DEERFLOW_BINDS "$cwd"; do
    [ -n "$d" ] && [ -d "$d" ] || continue
    mkdir -p "$root$d" && mount --rbind "$d" "$root$d"
  done
  IFS=$old; set +f
  exec chroot "$root" /bin/sh -c "cd \"\$0\" && exec python3 \"\$@\"" "$cwd" "$@"' sh "$root" "$PWD" "$@"
