#!/usr/bin/env bash
# Renames every internal symbol that carries the public-looking sbx_ prefix to sbx__ (the rule of
# docs/design/style.md): across src/ tests/ fuzz/ bench/ docs/ and README.md, in place.
#
#   scripts/rename-internals.sh [BUILD_DIR]     (default: build, a fresh build of this tree)
#   scripts/rename-internals.sh --list [BUILD_DIR]   only prints the old -> new names
#
# Public = declared in include/sbx/*.h (the compiler lists the declarations: gcc -aux-info, as
# tests/abi/check_exports.py does). Internal = every other global function or variable named
# sbx_* that an object file of BUILD_DIR defines (nm), which covers the library, the front-ends,
# sbx-init, the tests and the benchmarks that the build compiles. Whole identifiers only:
# sbx_tlv_put never touches sbx_tlv_put_str; names that are also a struct, union or enum tag
# (none today) are refused. Run it on a clean git tree, then build and test; `git diff` shows it.
set -euo pipefail
cd "$(dirname "$0")/.."
list_only=
if [ "${1:-}" = --list ]; then
  list_only=1
  shift
fi
B=${1:-build}
[ -d "$B" ] || { echo "rename-internals: no build folder $B (make build first)" >&2; exit 2; }
mapfile -t objects < <(find "$B" -name '*.o' -type f)
[ "${#objects[@]}" -gt 0 ] || { echo "rename-internals: no object files in $B" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Public: every function a public header declares.
for h in include/sbx/*.h; do
  echo "#include <sbx/$(basename "$h")>" >"$tmp/t.c"
  gcc -std=gnu17 -Iinclude -fsyntax-only -aux-info "$tmp/t.aux" "$tmp/t.c"
  sed -n 's|^/\* [^:]*include/sbx/[^:]*:[0-9]*:[A-Z]* \*/ extern .*[^a-z0-9_]\(sbx_[a-z0-9_]*\) (.*|\1|p' \
    "$tmp/t.aux"
done | sort -u >"$tmp/public"
[ "$(wc -l <"$tmp/public")" -ge 10 ] || { echo "rename-internals: found too few public functions" >&2; exit 1; }
# Defined globals (T functions, D/B/R data) named sbx_ but not already sbx__.
nm --defined-only "${objects[@]}" 2>/dev/null |
  awk 'NF == 3 && $2 ~ /^[TDBR]$/ && $3 ~ /^sbx_[a-z0-9]/ { print $3 }' | sort -u >"$tmp/defined"
comm -23 "$tmp/defined" "$tmp/public" >"$tmp/internal"
n=$(wc -l <"$tmp/internal")
if [ -n "$list_only" ]; then
  sed 's/^sbx_\(.*\)/sbx_\1 -> sbx__\1/' "$tmp/internal"
  echo "$n internal names (of $(wc -l <"$tmp/defined") defined, $(wc -l <"$tmp/public") public)" >&2
  exit 0
fi
[ "$n" -gt 0 ] || { echo "rename-internals: nothing to rename"; exit 0; }

mapfile -t files < <(git ls-files -- src tests fuzz bench docs README.md |
  grep -E '\.(c|h|py|sh|mjs|md|txt|cmake)$|CMakeLists\.txt$' |
  while read -r f; do [ -f "$f" ] && grep -lE '\bsbx_[a-z0-9]' "$f" || true; done)
names=$(paste -sd'|' "$tmp/internal")
clash=$(grep -nEo "\b(struct|union|enum)[[:space:]]+($names)\b" "${files[@]}" include/sbx/*.h || true)
if [ -n "$clash" ]; then
  echo "rename-internals: these names are also tags, rename them by hand first:" >&2
  echo "$clash" >&2
  exit 1
fi
# One perl pass over every file, all names at once (\b on both sides: whole identifiers only).
perl -i -pe 'BEGIN { open my $f, "<", shift @ARGV or die "names: $!"; chomp(my @n = <$f>);
    s/^sbx_// for @n; my $alt = join "|", sort { length($b) <=> length($a) } @n;
    $re = qr/\bsbx_($alt)\b/ }
  s/$re/sbx__$1/g' "$tmp/internal" "${files[@]}"
# The names are one character longer: let clang-format rewrap what now passes 100 columns.
mapfile -t csrc < <(printf '%s\n' "${files[@]}" | grep -E '\.[ch]$' || true)
[ "${#csrc[@]}" -eq 0 ] || clang-format -i "${csrc[@]}"
echo "rename-internals: $n names renamed in ${#files[@]} files; now build and run the tests"
