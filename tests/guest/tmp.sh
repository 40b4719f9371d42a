# Sourced by the guest's init scripts. /tmp: boot.sh's scratch disk (/dev/vda, ext4) when it
# gave one, else a fresh tmpfs (as on many hosts). The folder of the host's /tmp that holds the
# checkout (a CI clone may live there) stays visible at the same path, bound from the overlay
# root before the new /tmp hides it.
guest_tmp() {
  local src=$1 top=
  case $src in /tmp/?*) top=${src#/tmp/} top=${top%%/*} ;; esac
  if [ -n "$top" ]; then
    mkdir -p /mnt/host-tmp
    mount --bind "/tmp/$top" /mnt/host-tmp
  fi
  # the disk's root is /tmp itself (not a bind of a folder of it): paths the kernel reports,
  # such as a loop device's backing_file, read as on a host with /tmp on its own disk
  if [ -b /dev/vda ] && mount -t ext4 /dev/vda /tmp; then
    chmod 1777 /tmp
    echo "guest: /tmp on the scratch disk (ext4)"
  else
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
  fi
  if [ -n "$top" ]; then
    mkdir -p "/tmp/$top"
    mount --move /mnt/host-tmp "/tmp/$top"
  fi
}
# The running kernel's modules (boot.sh passes where prepare.sh unpacked them) at
# /lib/modules/VERSION, where the kernel's on-demand loading (modprobe) looks: the host's root
# has another kernel's, or none.
guest_modules() {
  local dir=${SBX_GUEST_MODULES:-}/$(uname -r)
  [ -n "${SBX_GUEST_MODULES:-}" ] && [ -e "$dir/modules.dep" ] || { echo "guest: no modules for $(uname -r)"; return; }
  mkdir -p "/lib/modules/$(uname -r)" && mount --bind "$dir" "/lib/modules/$(uname -r)" || return
  # tun by hand: its /dev/net/tun appears when it loads (pasta opens it; nothing asks for it);
  # the egress enforcer's nftables pieces up front: loaded on demand under emulation, the first
  # sandbox's sbx-net could miss its 15 s to answer
  local m
  for m in tun veth nf_tables nft_ct nft_log nfnetlink_log nft_reject_inet nft_queue nfnetlink_queue; do
    modprobe -q "$m" || echo "guest: modprobe $m failed"
  done
}
