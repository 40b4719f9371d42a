#!/bin/bash
# cgroup v2 checks inside the guest, as root: where sandboxes go and what bounds them, in the
# contexts real hosts have.  checks.sh BUILD_DIR
#   root       the caller in the root cgroup: sandboxes at /sbx/<id>, with their limits
#   service    the caller in a populated, limited cgroup (a systemd service): sandboxes below
#              it, the caller moved to its leaf, the service's memory.max binds a sandbox
#   container  a cgroup namespace rooted at the caller's own populated cgroup, cgroup2 mounted
#              in it (Docker --privileged, a privileged pod): works, inside the pod's cgroup
#   readonly   cgroup2 mounted read-only: a clear refusal, or a warning with cgroup_required false
#   rootless   an ordinary user with its user manager: doctor, exec, the files its own, limits in
#              a scope of user@.service
set -u
B=$(realpath "$1")
fails=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
W=$(mktemp -d /tmp/sbx-checks.XXXX)
printf 'sandbox:\n  memory_mib: 128\n  pids: 64\n  cpus: 0.5\n' > "$W/limits.yaml"
printf 'sandbox:\n  memory_mib: 1024\n' > "$W/big.yaml"
printf 'sandbox:\n  cgroup_required: false\n' > "$W/optional.yaml"
sbx() { "$B/sbx" --home "$W/home" "$@"; }


# root (or, under systemd, our own unit's cgroup: sandboxes go below it)
own=$(sed -n 's/^0:://p' /proc/self/cgroup | sed 's|/sbx-leaf$||; s|^/$||')
out=$("$B/sbx" --home "$W/home" doctor 2>&1)
[[ $? == 0 ]] && ok "doctor: sandboxes can start" || bad "doctor: $out"
echo "$out"
out=$(sbx --config "$W/limits.yaml" exec -t r -- echo hi 2>&1)
[[ $out == hi ]] && ok "root: exec" || bad "root: exec: $out"
d=$(ls -d /sys/fs/cgroup$own/sbx/*-* 2>/dev/null | head -1)
if [[ -n $d && $(cat "$d/memory.max") == 134217728 && $(cat "$d/pids.max") == 64 && $(cat "$d/cpu.max") == "50000 100000" ]]; then
  ok "root: limits in $d"
else
  bad "root: limits: ${d:-no cgroup under /sys/fs/cgroup$own/sbx}"
fi
out=$(sbx --config "$W/limits.yaml" exec -t r -- 'python3 -c "b=bytearray(512<<20); print(len(b))"' 2>&1)
[[ $out != *536870912* ]] && ok "root: 512 MiB hog stopped at 128 MiB" || bad "root: hog ran: $out"
sbx down > /dev/null 2>&1
[[ -z $(ls -d /sys/fs/cgroup$own/sbx/*-* 2>/dev/null) ]] && ok "root: down removes the cgroup" || bad "root: cgroup left"

# service: a populated cgroup with its own memory.max
svc=/sys/fs/cgroup/guest.slice/front.service
mkdir -p "$svc"
echo "+memory +pids +cpu" > /sys/fs/cgroup/guest.slice/cgroup.subtree_control
echo $((300 << 20)) > "$svc/memory.max"
# what systemd marks a Delegate=yes unit's cgroup with (auto then uses cgroupfs below it)
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "trusted.delegate", b"1")' "$svc"
(
  echo $BASHPID > "$svc/cgroup.procs"
  sleep 300 & # another process of the service
  out=$(sbx --config "$W/big.yaml" exec -t s -- 'python3 -c "b=bytearray(512<<20); print(len(b))"' 2>&1)
  [[ $out != *536870912* ]] && ok "service: its memory.max binds the sandbox" || bad "service: hog ran: $out"
  [[ -d $svc/sbx && -d $svc/sbx-leaf ]] && ok "service: sandboxes in $svc/sbx, the service in sbx-leaf" ||
    bad "service: layout $(ls $svc)"
  [[ -z $(cat "$svc/cgroup.procs") ]] && ok "service: no process left in the service's own cgroup" ||
    bad "service: $svc still has $(cat "$svc/cgroup.procs")"
  [[ $(sed -n 's/^0:://p' /proc/$!/cgroup) == /guest.slice/front.service/sbx-leaf ]] && ok "service: its other process moved too" ||
    bad "service: other process in $(cat /proc/$!/cgroup)"
  out=$(sbx exec -t s2 -- echo again 2>&1)
  [[ $out == again ]] && ok "service: a second front-end from the leaf" || bad "service: second: $out"
  [[ ! -d $svc/sbx-leaf/sbx ]] && ok "service: no nesting below the leaf" || bad "service: nested below the leaf"
  sbx down > /dev/null 2>&1
  kill $! 2>/dev/null
)

# container: a cgroup namespace rooted at a populated cgroup, cgroup2 mounted inside
ctr=/sys/fs/cgroup/pod.slice/ctr
mkdir -p "$ctr"
echo "+memory +pids +cpu" > /sys/fs/cgroup/pod.slice/cgroup.subtree_control
(
  echo $BASHPID > "$ctr/cgroup.procs"
  unshare -C -m --propagation private bash -c '
    umount -l /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit 1
    out=$("$0" --home "$1" --config "$2" exec -t c -- echo inside 2>&1)
    [[ $out == inside ]] && echo "PASS container: exec" || echo "FAIL container: $out"
    [[ -d /sys/fs/cgroup/sbx && -d /sys/fs/cgroup/sbx-leaf ]] && echo "PASS container: sandboxes at the namespace root" || echo "FAIL container: $(ls /sys/fs/cgroup)"
    "$0" --home "$1" down >/dev/null 2>&1' "$B/sbx" "$W/home" "$W/limits.yaml"
) | tee "$W/ctr.log"
grep -q FAIL "$W/ctr.log" && fails=$((fails + 1))
[[ -d $ctr/sbx ]] && ok "container: seen from the host, below the pod's cgroup" || bad "container: not below $ctr"

# read-only
unshare -m --propagation private bash -c '
  mount -o remount,bind,ro /sys/fs/cgroup  # this mount only, not the superblock
  out=$("$0" --home "$1" exec -t ro -- echo x 2>&1)
  [[ $? != 0 && $out == *read-only* && $out == *"sbx doctor"* ]] && echo "PASS readonly: refused: $out" || echo "FAIL readonly: $out"
  out=$("$0" --home "$1" --config "$2" exec -t ro -- echo x 2>&1)
  [[ $out == *x && $out == *WITHOUT* ]] && echo "PASS readonly: optional runs with a warning" || echo "FAIL readonly optional: $out"
  "$0" --home "$1" down >/dev/null 2>&1' "$B/sbx" "$W/home" "$W/optional.yaml" | tee "$W/ro.log"
grep -q FAIL "$W/ro.log" && fails=$((fails + 1))

# systemd: our unit is Delegate=yes, so the sections above ran below it (cgroupfs); here the
# systemd manager, chosen by config and, for a unit that is not delegated, by auto
if [[ -d /run/systemd/system ]]; then
  printf 'sandbox:\n  cgroup_manager: systemd\n  memory_mib: 128\n  pids: 64\n' > "$W/systemd.yaml"
  out=$(sbx --config "$W/systemd.yaml" exec -t sd -- cat /proc/self/cgroup 2>&1)
  scope=$(ls -d /sys/fs/cgroup/sbx.slice/sbx-*.scope 2>/dev/null | head -1)
  [[ -n $scope && $(cat "$scope/memory.max") == 134217728 && $(cat "$scope/pids.max") == 64 ]] &&
    ok "systemd: a scope in sbx.slice with the limits: $scope" || bad "systemd: $out; scope ${scope:-none}"
  unit=$(basename "${scope:-none}")
  [[ $(systemctl show -p MemoryMax --value "$unit") == 134217728 ]] && ok "systemd: systemd knows the limit" ||
    bad "systemd: systemctl show $unit: $(systemctl show -p MemoryMax "$unit")"
  systemctl daemon-reload
  [[ $(cat "$scope/memory.max" 2>/dev/null) == 134217728 ]] && ok "systemd: the limit survives daemon-reload" || bad "systemd: reload reset the limit"
  sbx down > /dev/null 2>&1
  sleep 1
  [[ ! -d $scope ]] && ok "systemd: down removes the scope" || bad "systemd: $scope left"
  # a spare adopted with other limits (sbxd's resourceLimits): set as unit properties too, so
  # a daemon-reload keeps them (written to cgroupfs alone, systemd put the spare's back)
  printf 'sandbox:\n  cgroup_manager: systemd\n  memory_mib: 128\n  spares: 1\n' > "$W/spares.yaml"
  # its home on ext4: adopting idmaps the user-data folder, which /tmp (tmpfs before 6.3) cannot
  truncate -s 512M "$W/sd.img" && mkfs.ext4 -q -F "$W/sd.img" && mkdir -p "$W/sd-home" &&
    mount -o loop "$W/sd.img" "$W/sd-home" || echo "checks: no ext4 home for the spare check"
  "$B/sbxd" --home "$W/sd-home" --config "$W/spares.yaml" --listen 127.0.0.1:18089 2> "$W/sbxd.log" &
  sbxd_pid=$!
  for _ in $(seq 100); do
    [[ $(ls -d /sys/fs/cgroup/sbx.slice/sbx-*.scope 2>/dev/null | wc -l) -ge 1 ]] && break
    sleep 0.2
  done
  before=$(ls -d /sys/fs/cgroup/sbx.slice/sbx-*.scope 2>/dev/null)
  python3 -c 'import json, urllib.request as u; print(u.urlopen(u.Request("http://127.0.0.1:18089/v1/sandboxes", json.dumps({"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": {"cpu": "1", "memory": "256Mi"}, "timeout": 600}).encode(), {"Content-Type": "application/json"})).read().decode())' > "$W/create.json" 2>&1
  sleep 1
  adopted=
  for d in $before; do [[ $(cat "$d/memory.max" 2>/dev/null) == 268435456 ]] && adopted=$d; done
  if [[ -n $adopted ]]; then
    systemctl daemon-reload
    [[ $(cat "$adopted/memory.max") == 268435456 && $(cat "$adopted/cpu.max") == "100000 100000" ]] &&
      ok "systemd: an adopted spare's limits survive daemon-reload" ||
      bad "systemd: reload reset the adopted spare's limits: $(cat "$adopted/memory.max") $(cat "$adopted/cpu.max")"
  else
    bad "systemd: no spare was adopted with 256 MiB: $(cat "$W/create.json") $(grep -i spare "$W/sbxd.log" | tail -3)"
  fi
  kill "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
  "$B/sbx" --home "$W/sd-home" down > /dev/null 2>&1
  umount "$W/sd-home" 2>/dev/null
  out=$(systemd-run --quiet --wait --pipe -p MemoryMax=300M "$B/sbx" --home "$W/home" exec -t nd -- echo fine 2>&1)
  scope=$(ls -d /sys/fs/cgroup/sbx.slice/sbx-*.scope 2>/dev/null | head -1)
  [[ $out == fine && -n $scope ]] && ok "systemd: auto in a unit without Delegate= uses a scope in sbx.slice" ||
    bad "systemd: auto: $out; ${scope:-no scope}"
  out=$(systemd-run --quiet --wait --pipe -p Delegate=yes "$B/sbx" --home "$W/home" doctor 2>&1)
  [[ $out == *"delegated to us"* ]] && ok "systemd: doctor sees a Delegate=yes unit" || bad "systemd: doctor: $out"
  sbx down > /dev/null 2>&1
fi

# rootless: an ordinary user (made here: the guest's root is a throw-away overlay) with its
# user manager (user@.service, which delegates cpu, memory and pids) and a copy of the binaries
# it can reach (the checkout may be below root's 0700 home)
if useradd -m -s /bin/bash sbxuser 2>/dev/null || id sbxuser > /dev/null 2>&1; then
  uid=$(id -u sbxuser)
  rb=$(mktemp -d /tmp/sbx-rl-bin.XXXX)
  cp "$B/sbx" "$B/sbx-init" "$rb/" && chmod 755 "$rb" "$rb/sbx" "$rb/sbx-init"
  chmod 644 "$W/limits.yaml" && chmod 755 "$W"
  systemctl start "user@$uid.service" 2>/dev/null
  as_user() {
    setpriv --reuid="$uid" --regid="$uid" --init-groups env -i HOME=/home/sbxuser PATH="$PATH" \
      XDG_RUNTIME_DIR="/run/user/$uid" "$@"
  }
  out=$(as_user "$rb/sbx" doctor 2>&1)
  [[ $? == 0 && $out == *"rootless mode"* ]] && ok "rootless: doctor: sandboxes can start" || bad "rootless: doctor: $out"
  echo "$out"
  # stdout alone: without a user manager (bash as PID 1) stderr has the no-cgroup warning
  out=$(as_user "$rb/sbx" exec -t a -- 'id -u; echo x > /mnt/user-data/outputs/f' 2> "$W/rl.err")
  f=/home/sbxuser/.local/state/sbx/users/default/threads/a/user-data/outputs/f
  [[ $out == 0 && $(stat -c %u "$f" 2>/dev/null) == "$uid" ]] && ok "rootless: exec as root inside, files the user's on the host" ||
    bad "rootless: exec: $out $(cat "$W/rl.err"); $(stat -c %u "$f" 2>&1)"
  ubase=/sys/fs/cgroup/user.slice/user-$uid.slice/user@$uid.service
  if [[ -S /run/user/$uid/systemd/private ]]; then
    out=$(as_user "$rb/sbx" --config "$W/limits.yaml" exec -t l -- echo hi 2>&1)
    scope=$(ls -d "$ubase"/sbx.slice/sbx-*.scope 2>/dev/null | head -1)
    [[ $out == hi && -n $scope && $(cat "$scope/memory.max") == 134217728 && $(cat "$scope/pids.max") == 64 ]] &&
      ok "rootless: limits through the user's manager in $scope" || bad "rootless: limits: $out; ${scope:-no scope in $ubase/sbx.slice}"
    out=$(as_user "$rb/sbx" --config "$W/limits.yaml" exec -t l -- 'python3 -c "b=bytearray(512<<20); print(len(b))"' 2>&1)
    [[ $out != *536870912* ]] && ok "rootless: 512 MiB hog stopped at 128 MiB" || bad "rootless: hog ran: $out"
  else
    out=$(as_user "$rb/sbx" exec -t l -- echo hi 2>&1)
    [[ $out == *hi* && $out == *"WITHOUT a cgroup"* ]] && ok "rootless: no user manager: runs with the warning" || bad "rootless: $out"
    echo "rootless: user@$uid.service did not start: $(systemctl status "user@$uid.service" 2>&1 | tail -3)"
  fi
  as_user "$rb/sbx" down > /dev/null 2>&1
  [[ -z $(ls -d "$ubase"/sbx.slice/sbx-*.scope 2>/dev/null) ]] && ok "rootless: down removes the scopes" || bad "rootless: scopes left"
  systemctl stop "user@$uid.service" 2>/dev/null
  rm -rf "$rb"
else
  bad "rootless: useradd failed"
fi

echo "checks: $fails failed"
[[ $fails == 0 ]]
