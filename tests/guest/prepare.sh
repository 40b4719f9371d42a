#!/bin/bash
# Fetches Debian's stock kernel (the package linux-image-amd64 depends on, from the archive this
# host's apt uses) into DIR and builds the guest's initramfs:  prepare.sh DIR
# Leaves DIR/vmlinuz, DIR/kernel/lib/modules (boot.sh gives them to the guest) and DIR/initrd.gz;
# a kernel already there is kept.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
cd "$dir"
if [[ ! -e vmlinuz ]]; then
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [[ -n $pkg ]] || { echo "prepare.sh: no kernel package behind linux-image-amd64 (apt-get update?)" >&2; exit 1; }
  rm -rf kernel ./*.deb
  apt-get download "$pkg" >/dev/null
  dpkg-deb -x ./"$pkg"_*.deb kernel
  ln -sf kernel/boot/vmlinuz-* vmlinuz
  rm -f ./*.deb
fi
# rebuilt when its script changed (a module added)
[[ initrd.gz -nt $here/mkinitramfs.sh ]] || "$here/mkinitramfs.sh" kernel initrd.gz
echo "prepare.sh: $(readlink vmlinuz)"
