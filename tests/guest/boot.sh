#!/bin/bash
# Boots a stock kernel under qemu with software emulation (TCG) on this host's root (read-only
# 9p under a tmpfs overlay) and runs one command in it as root:
#   boot.sh [-t SECONDS] [-i init.sh|init-systemd.sh] [-d GIB] KERNEL INITRD OUTDIR -- COMMAND...
# OUTDIR gets console.log, run.log (the command's output) and rc (its exit status); it is
# /mnt/out in the guest. Exits with the command's status (124 if the guest gave none).
# -d GIB: the guest's /tmp on a fresh ext4 disk of that size (OUTDIR/scratch.img,
# sparse, a virtio-blk drive) instead of a tmpfs: ext4 can be idmapped on any kernel with
# mount_setattr (tmpfs only from Linux 6.3) and does not eat the guest's memory.
# The kernel's own modules (KERNEL's ../lib/modules, as prepare.sh unpacks it) are the guest's
# /lib/modules, so what the kernel loads on demand (nf_tables, veth, ...) loads.
set -euo pipefail
limit=600 init=init.sh disk=
while getopts t:i:d: o; do
  case $o in t) limit=$OPTARG ;; i) init=$OPTARG ;; d) disk=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
kernel=$(realpath "$1") initrd=$(realpath "$2") out=$3
shift 3
[[ ${1:-} == -- ]] && shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(realpath "$out")
rm -f "$out"/{console.log,run.log,rc,scratch.img}
drive=()
if [[ -n $disk ]]; then
  [[ $disk =~ ^[1-9][0-9]*$ ]] || { echo "boot.sh: -d takes a size in GiB, not '$disk'" >&2; exit 2; }
  command -v mkfs.ext4 > /dev/null || { echo "boot.sh: -d needs mkfs.ext4 (e2fsprogs)" >&2; exit 2; }
  truncate -s "${disk}G" "$out/scratch.img"
  mkfs.ext4 -q -F -m 0 -L sbx-scratch "$out/scratch.img"
  # cache=unsafe: a throw-away disk, no flush to the host's disk on every fsync
  drive=(-drive "file=$out/scratch.img,if=virtio,format=raw,cache=unsafe,discard=unmap")
fi
modules=$(dirname "$kernel")/../lib/modules
[[ -d $modules ]] && modules=$(realpath "$modules") || modules=
printf '%q ' "$@" > "$out/run.sh"
echo >> "$out/run.sh"
echo "$limit" > "$out/timeout"
timeout -k 10 $((limit + 400)) qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp 2 -m 2G \
  -display none -monitor none -serial "file:$out/console.log" -no-reboot -nic none \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 loglevel=4 SBX_GUEST_INIT=$here/$init SBX_GUEST_MODULES=$modules" \
  "${drive[@]}" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$out,mount_tag=out,security_model=none" || echo "boot.sh: qemu exit $?"
rc=$(cat "$out/rc" 2>/dev/null || echo 124)
rm -f "$out/scratch.img"
echo "boot.sh: guest rc $rc (console: $out/console.log, output: $out/run.log)"
exit "$rc"
