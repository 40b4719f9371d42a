#!/usr/bin/env bash
# make check's phases, timed: `phase.sh FILE NAME CMD...` runs CMD, prints how long it took and
# appends "NAME SECONDS STATUS" to FILE; `phase.sh FILE --summary` prints FILE as a table (also
# printed when a phase fails, so the times so far stay visible).
set -uo pipefail
file=$1
shift
summary() {
  echo "== make check: time per phase"
  awk '{ printf "   %-12s %5ds  %s\n", $1, $2, $3; t += $2 } END { printf "   %-12s %5ds\n", "total", t }' "$file"
}
if [ "${1:-}" = --summary ]; then
  summary
  exit 0
fi
name=$1
shift
mkdir -p "$(dirname "$file")"
start=$(date +%s)
"$@"
rc=$?
took=$(($(date +%s) - start))
status=ok
[ "$rc" -eq 0 ] || status="FAILED($rc)"
echo "$name $took $status" >>"$file"
echo "== $name: ${took}s $status"
if [ "$rc" -ne 0 ]; then
  summary
fi
exit "$rc"
