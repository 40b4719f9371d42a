#!/bin/bash
# PID 1 of the guest without a service manager: what a booted host mounts, cgroup2 alone at
# /sys/fs/cgroup with memory, pids and cpu enabled in the root (as systemd does), then run.sh.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
here=$(cd "$(dirname "$0")" && pwd)
mount -t proc proc /proc
mount -t sysfs sysfs /sys
. "$here/tmp.sh"
guest_tmp "$here"
guest_modules
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
echo "+memory +pids +cpu" > /sys/fs/cgroup/cgroup.subtree_control
mount --make-rshared /
hostname sbx-guest
ip link set lo up 2>/dev/null || busybox ip link set lo up
bash "$here/run.sh"
echo o > /proc/sysrq-trigger
sleep 5
busybox poweroff -f
