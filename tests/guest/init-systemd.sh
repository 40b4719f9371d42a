#!/bin/bash
# PID 1 of the guest with the host's systemd: a oneshot unit (Delegate=yes, so the cgroup below
# it is ours, as a packaged sbxd's would be) runs run.sh and powers off when it ends; what a
# test boot does not need is masked. The root is a tmpfs overlay: nothing reaches the host.
here=$(cd "$(dirname "$0")" && pwd)
u=/etc/systemd/system
mkdir -p $u/multi-user.target.wants
cat > $u/sbx-guest.service <<UNIT
[Unit]
Description=sbx guest run
After=basic.target
SuccessAction=poweroff-force
FailureAction=poweroff-force
[Service]
Type=oneshot
Delegate=yes
# a sandbox OOM-killed below the unit must not stop it (the default OOMPolicy=stop would)
OOMPolicy=continue
ExecStart=/bin/bash $here/run.sh
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
UNIT
ln -sf $u/sbx-guest.service $u/multi-user.target.wants/sbx-guest.service
for m in getty@tty1.service serial-getty@ttyS0.service getty.target apt-daily.timer \
  apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer man-db.timer \
  e2scrub_reap.service systemd-timesyncd.service systemd-pstore.service remote-fs.target \
  postgresql.service docker.service containerd.service systemd-udev-trigger.service \
  systemd-udevd.service systemd-udev-settle.service systemd-logind.service \
  cron.service ssh.service rsyslog.service networking.service systemd-networkd.service \
  systemd-resolved.service apparmor.service ldconfig.service systemd-hwdb-update.service \
  keyboard-setup.service console-setup.service man-db.service; do
  ln -sf /dev/null "$u/$m"
done
echo sbx-guest > /etc/hostname
# as on most hosts (and as init.sh does): lease owners are read from /proc/locks, whose inode
# numbers are the upper layer's on the overlay root, not what stat says
. "$here/tmp.sh"
guest_tmp "$here"
guest_modules
exec /lib/systemd/systemd --unit=multi-user.target --log-target=console --show-status=false
