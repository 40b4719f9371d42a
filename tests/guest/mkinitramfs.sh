#!/bin/bash
# A small initramfs (static busybox and the 9p/overlay/loop/ext4/virtio-blk modules) for a stock Debian kernel
# unpacked with `dpkg-deb -x linux-image-*.deb DIR`:  mkinitramfs.sh DIR OUT.cpio.gz
# Its /init mounts this host's root (9p tag "hostroot", read-only) under a tmpfs overlay and
# the 9p tag "out" at /mnt/out, then switch_roots into $SBX_GUEST_INIT (a host path).
set -euo pipefail
kdir=$1 out=$2
kver=$(ls "$kdir/lib/modules" | head -1)
mdir=$kdir/lib/modules/$kver
[[ -e $mdir/modules.dep ]] || depmod -b "$kdir" "$kver"
bb=$(command -v busybox)
file -L "$bb" | grep -q 'statically linked' || { echo "mkinitramfs: need busybox-static" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,mod,lower,ovl,newroot}
cp "$bb" "$work/bin/busybox"
declare -A seen=()
order=()
add() { # a module after its dependencies
  [[ -n ${seen[$1]:-} ]] && return
  seen[$1]=1
  local d
  for d in $(grep -E "^$1:" "$mdir/modules.dep" | cut -d: -f2); do add "$d"; done
  order+=("$1")
}
# loop: disk_mib's images; ext4, virtio_blk: boot.sh's scratch disk (later ones load on demand
# from /lib/modules, see tmp.sh)
for m in 9p 9pnet_virtio virtio_pci virtio_blk overlay loop crc32c_generic ext4; do
  rel=$(grep -E "/$m\.ko(\.xz|\.zst)?:" "$mdir/modules.dep" | cut -d: -f1 | head -1)
  [[ -n $rel ]] && add "$rel"
done
for rel in "${order[@]}"; do
  name=$(basename "$rel")
  case $name in
    *.xz) xz -dc "$mdir/$rel" > "$work/mod/${name%.xz}"; name=${name%.xz} ;;
    *.zst) zstd -qdc "$mdir/$rel" > "$work/mod/${name%.zst}"; name=${name%.zst} ;;
    *) cp "$mdir/$rel" "$work/mod/$name" ;;
  esac
  echo "$name" >> "$work/modules.order"
done
cat > "$work/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /mod/$m || echo "initramfs: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower ||
  { echo "initramfs: no host root"; poweroff -f; }
mount -t tmpfs -o mode=0755 ovl /ovl
mkdir -p /ovl/upper /ovl/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work /newroot ||
  { echo "initramfs: no overlay"; poweroff -f; }
mkdir -p /newroot/mnt/out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /newroot/mnt/out
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/bash "$SBX_GUEST_INIT"
INIT
chmod 755 "$work/init"
cpio=$(command -v cpio || echo "$work/bin/busybox cpio")
(cd "$work" && find . | $cpio -o -H newc 2>/dev/null | gzip -1) > "$out"
echo "mkinitramfs: $out for $kver"
