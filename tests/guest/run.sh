#!/bin/bash
# Runs boot.sh's command (/mnt/out/run.sh) under its time limit; output to the console and
# /mnt/out/run.log, exit status to /mnt/out/rc.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
limit=$(cat /mnt/out/timeout 2>/dev/null || echo 600)
echo "guest: kernel $(uname -r), PID 1 $(cat /proc/1/comm), $(findmnt -n -o FSTYPE /sys/fs/cgroup)," \
  "root subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control), own $(cat /proc/self/cgroup)"
cd /tmp
timeout -k 10 "$limit" bash /mnt/out/run.sh 2>&1 | tee /mnt/out/run.log
rc=${PIPESTATUS[0]}
echo "guest: exit $rc after $(cut -d' ' -f1 /proc/uptime)s of uptime" | tee -a /mnt/out/run.log
echo "$rc" > /mnt/out/rc
sync
