#!/usr/bin/env bash
# A short tour of the sbx CLI on the embedded default (the linux backend).
set -euo pipefail
build=${1:-build}
sbx="$build/sbx"
export SBX_HOME=${SBX_HOME:-$PWD/.sbx}
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

run "$sbx" exec -t demo -- 'echo "hello from $(hostname)"; id; pwd'
run "$sbx" exec -t demo -- 'cd /mnt/user-data/workspace && printf "print(6*7)\n" > app.py && python3 app.py'
say "echo report | $sbx write -t demo /mnt/user-data/outputs/report.txt"
echo "report" | "$sbx" write -t demo /mnt/user-data/outputs/report.txt
run "$sbx" glob -t demo /mnt/user-data '**/*.py'
run "$sbx" grep -t demo /mnt/user-data 'print'
run "$sbx" exec -t demo --json -- 'echo out; echo err >&2; exit 3' || true
run "$sbx" ps
run "$sbx" rm -t demo
# an image, built offline from busybox-static (tests/images/mkimage.py), with a writable root
img=$(mktemp -d)/busybox.tar
run python3 "$(dirname "$0")/../tests/images/mkimage.py" "$img" --name busybox:tour
run "$sbx" image import "$img"
run "$sbx" images
run "$sbx" exec -t img --image busybox:tour -- 'echo installed > /usr/bin/tool; busybox | head -1; cat /usr/bin/tool'
run "$sbx" rm -t img
run "$sbx" rmi busybox:tour
run "$sbx" image prune
rm -rf "$(dirname "$img")"
