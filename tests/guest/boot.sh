#!/bin/bash
# Boots a stock kernel under qemu with software emulation (TCG) on this host's root (read-only
# 9p under a tmpfs overlay) and runs one command in it as root:
#   boot.sh [-t SECONDS] [-i init.sh|init-systemd.sh] KERNEL INITRD OUTDIR -- COMMAND...
# OUTDIR gets console.log, run.log (the command's output) and rc (its exit status); it is
# /mnt/out in the guest. Exits with the command's status (124 if the guest gave none).
set -euo pipefail
limit=600 init=init.sh
while getopts t:i: o; do
  case $o in t) limit=$OPTARG ;; i) init=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
kernel=$(realpath "$1") initrd=$(realpath "$2") out=$3
shift 3
[[ ${1:-} == -- ]] && shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(realpath "$out")
rm -f "$out"/{console.log,run.log,rc}
printf '%q ' "$@" > "$out/run.sh"
echo >> "$out/run.sh"
echo "$limit" > "$out/timeout"
timeout -k 10 $((limit + 400)) qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp 2 -m 2G \
  -display none -monitor none -serial "file:$out/console.log" -no-reboot -nic none \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 loglevel=4 SBX_GUEST_INIT=$here/$init" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$out,mount_tag=out,security_model=none" || echo "boot.sh: qemu exit $?"
rc=$(cat "$out/rc" 2>/dev/null || echo 124)
echo "boot.sh: guest rc $rc (console: $out/console.log, output: $out/run.log)"
exit "$rc"
