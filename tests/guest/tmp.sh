# Sourced by the guest's init scripts: a fresh tmpfs at /tmp (as on most hosts), keeping the
# folder of the host's /tmp that holds the checkout (a CI clone may live there) visible at the
# same path, bound from the overlay root before the tmpfs hides it.
guest_tmp() {
  local src=$1 top=
  case $src in /tmp/?*) top=${src#/tmp/} top=${top%%/*} ;; esac
  if [ -n "$top" ]; then
    mkdir -p /mnt/host-tmp
    mount --bind "/tmp/$top" /mnt/host-tmp
  fi
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
  if [ -n "$top" ]; then
    mkdir -p "/tmp/$top"
    mount --move /mnt/host-tmp "/tmp/$top"
  fi
}
