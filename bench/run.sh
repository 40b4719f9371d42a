#!/bin/bash
# bench/run.sh: sbx's benchmark, one command. Installs the peers (Debian packages), builds sbx
# (Release, in build-bench/) and the bench programs, runs every case against its peers,
# interleaved (A B A B ...), and regenerates bench/README.md and bench/plots/*.png.
#
#   bench/run.sh                 full run (bounded: under 10 minutes)
#   BENCH_QUICK=1 bench/run.sh   quick validation run (under 1 minute)
#
# Environment:
#   BENCH_QUICK=1        fewer samples, a 10,000-file tree, 20/100 sandboxes, no profiles
#   BENCH_PROFILE=0|1    profile the two hot paths (default: 1, 0 in quick mode)
#   BENCH_HYPERFINE=0|1  hyperfine cross-check of cold start and warm exec (default like PROFILE)
#   BENCH_BUILD=DIR      sbx build directory (default build-bench)
#   BENCH_WORK=DIR       scratch: state dir, search tree, OCI bundles (default /tmp/sbx-bench)
#   BENCH_RESULTS=DIR    samples of the last run (default bench/results); the report reads them
#   BENCH_SBXD_PORT=N    port for sbxd when build-bench/sbxd exists (default 18931)
#   SBXD_CMD="..."       how to start sbxd ({home}, {config} are replaced); default
#                        "$BENCH_BUILD/sbxd --home {home} --config {config}"
#   BENCH_SBXD_URL=URL   use an sbxd that is already running instead
#   BENCH_SKIP_DEPS=1    do not apt-get install anything
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BUILD:-$ROOT/build-bench}
QUICK=${BENCH_QUICK:-0}
WORK=${BENCH_WORK:-/tmp/sbx-bench}
RES=${BENCH_RESULTS:-$ROOT/bench/results}
PROFILE=${BENCH_PROFILE:-$([ "$QUICK" = 1 ] && echo 0 || echo 1)}
HYPERFINE=${BENCH_HYPERFINE:-$PROFILE}
SBXD_PORT=${BENCH_SBXD_PORT:-18931}
T0=$(date +%s)

if [ "$QUICK" = 1 ]; then
  # rounds and time budgets (seconds) per group
  COLD_N=40 COLD_T=5 IDLE_N=10 IDLE_T=4 FIRST_N=10 FIRST_T=3 WARM_N=60 WARM_T=5
  F4K_N=20 F1M_N=10 F100M_N=1 FILE_T=2 F100M_T=2 LS_N=20 LS_T=2
  GLOB_N=5 GLOB_T=3 GREP_N=3 GREP_T=5 SEARCH_TIMEOUT=10
  TREE_FILES=10000 DENSITY_COUNTS="20 100" SCALE_SCOPES=100 SCALE_S=2 SCALE_RATE=200
  POOL_N=5 POOL_T=3 WARMUP=2 SETTLE_S=3
else
  COLD_N=300 COLD_T=40 IDLE_N=100 IDLE_T=40 FIRST_N=100 FIRST_T=30 WARM_N=500 WARM_T=40
  F4K_N=200 F1M_N=50 F100M_N=5 FILE_T=15 F100M_T=40 LS_N=200 LS_T=15
  GLOB_N=20 GLOB_T=30 GREP_N=6 GREP_T=50 SEARCH_TIMEOUT=30
  TREE_FILES=100000 DENSITY_COUNTS="100 1000" SCALE_SCOPES=1000 SCALE_S=10 SCALE_RATE=200
  POOL_N=40 POOL_T=20 WARMUP=5 SETTLE_S=15
fi

log() { printf '[bench %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
mkdir -p "$WORK" "$RES"
rm -f "$RES"/*.tsv "$RES"/*.json "$RES"/*.txt "$RES"/*.sh "$RES"/meta.env
exec > >(tee "$RES/run.log") 2>&1

# ---- 1. peers from Debian (idempotent: installs only what is missing) ----
DEPS="bubblewrap hyperfine ripgrep gnuplot-nox crun busybox-static util-linux procps valgrind
      strace linux-perf python3 cmake gcc pkg-config libjansson-dev libyaml-dev libseccomp-dev"
if [ "${BENCH_SKIP_DEPS:-0}" != 1 ]; then
  missing=$(for p in $DEPS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || echo "$p"
  done)
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    log "installing:" $missing
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

# ---- 2. build ----
log "building sbx (Release) and the bench programs in $B"
BENCH_BUILD=$B "$ROOT/bench/build.sh"
TB=$B/bench/tb
SBXBENCH=$B/bench/sbxbench
export SBX_INIT=$B/sbx-init

# ---- 3. scratch state ----
H=$WORK/home
CFG=$WORK/config.yaml
SBX=("$B/sbx" --home "$H" --config "$CFG")
# the same with spares (sandbox.spares: 2): a home of its own, refilled in the background (the
# CLI's detached filler; tb's thread for the library rows), competing for the CPUs
HS=$WORK/home-spares
CFGS=$WORK/config-spares.yaml
SBXS=("$B/sbx" --home "$HS" --config "$CFGS")
CRUN=(crun --root "$WORK/crun/state")
BWRAP=(bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent)
UNSHARE=(unshare --user --map-root-user --mount --pid --fork --net --ipc --uts)
USERDATA=$H/users/bench/threads
cat >"$CFG" <<EOF
sandbox:
  replicas: 2000
  idle_timeout: 0
  # the density and tail runs hold 1,000 sandboxes: past the default hard caps
  max_sandboxes: 0
  max_sandboxes_per_user: 0
  memory_overcommit: 0
sbxd:
  listen: 127.0.0.1:$SBXD_PORT
EOF
sed 's/^  idle_timeout: 0$/  idle_timeout: 0\n  spares: 2/' "$CFG" >"$CFGS"
# the CLI with DeerFlow's health_check_skip_seconds: a sandbox used in the last 2 s is reclaimed
# after a ping of its init instead of running `true` (same home)
CFGK=$WORK/config-skip.yaml
sed 's/^  idle_timeout: 0$/  idle_timeout: 0\n  health_check_skip_seconds: 2/' "$CFG" >"$CFGK"
SBXK=("$B/sbx" --home "$H" --config "$CFGK")

BWRAP_PID=
SBXD_PID=
cleanup() {
  set +e
  [ -n "$BWRAP_PID" ] && kill "$BWRAP_PID" 2>/dev/null && wait "$BWRAP_PID" 2>/dev/null
  if [ -n "$SBXD_PID" ] && kill "$SBXD_PID" 2>/dev/null; then
    for _ in $(seq 30); do kill -0 "$SBXD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SBXD_PID" 2>/dev/null && log "sbxd ignored SIGTERM for 3 s; killing it" &&
      kill -9 "$SBXD_PID" 2>/dev/null
    wait "$SBXD_PID" 2>/dev/null
  fi
  for c in $("${CRUN[@]}" list -q 2>/dev/null); do "${CRUN[@]}" delete -f "$c" >/dev/null 2>&1; done
  "${SBX[@]}" down >/dev/null 2>&1
  "${SBXS[@]}" down >/dev/null 2>&1
  return 0
}
trap cleanup EXIT
cleanup # leftovers of an interrupted run

SAMPLES=$RES/samples.tsv
CMDS=$RES/commands.tsv
LOADS=$RES/load.tsv
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# group NAME ROUNDS BUDGET [tb options...] -- cases...
group() {
  local name=$1 n=$2 budget=$3
  shift 3
  local before
  before=$(loadavg)
  log "group $name"
  "$TB" -n "$n" -w "$WARMUP" -T "$budget" -o "$SAMPLES" -c "$CMDS" -g "$name" "$@" || true
  printf '%s\t%s\t%s\n' "$name" "$before" "$(loadavg)" >>"$LOADS"
}

# ---- machine description ----
cgroup_mode() {
  if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "v2 (unified)"
  elif [ -d /sys/fs/cgroup/unified ] && [ "$(stat -f -c %T /sys/fs/cgroup/unified)" = cgroup2fs ]; then
    echo "hybrid (v1 controllers + an empty cgroup2 at /sys/fs/cgroup/unified)"
  else
    echo "v1 (legacy)"
  fi
}
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "quick=$QUICK"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "cpus=$(nproc)"
  echo "kernel=$(uname -r)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "mem_total_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
  echo "cgroup=$(cgroup_mode)"
  echo "virt=$(systemd-detect-virt 2>/dev/null || echo none)$(grep -q hypervisor /proc/cpuinfo && echo ', CPU hypervisor flag set')"
  kvm=$(for m in /sys/module/kvm*; do [ -e "$m" ] && printf '%s ' "${m##*/}"; done)
  echo "kvm=$kvm$([ -e /dev/kvm ] && echo '(/dev/kvm present)')"
  echo "load_start=$(loadavg)"
  echo "sbx_commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "sbx_dirty=$(git -C "$ROOT" status --porcelain -- src include 2>/dev/null | wc -l)"
  echo "bwrap=$(bwrap --version 2>/dev/null | head -1)"
  echo "crun=$(crun --version 2>/dev/null | head -1)"
  echo "rg=$(rg --version 2>/dev/null | head -1)"
  echo "grep=$(grep --version 2>/dev/null | head -1)"
  echo "find=$(find --version 2>/dev/null | head -1)"
  echo "busybox=$(busybox 2>/dev/null | head -1 | cut -d' ' -f1-2)"
  echo "hyperfine=$(hyperfine --version)"
  echo "tree_files=$TREE_FILES"
  echo "density_counts=$DENSITY_COUNTS"
  echo "scale_scopes=$SCALE_SCOPES"
  echo "scale_seconds=$SCALE_S"
  echo "scale_rate=$SCALE_RATE"
  echo "pause_ms=60"
} >"$RES/meta.env"

# ---- 4. fixtures ----
log "fixtures: busybox rootfs + OCI bundles, scopes, files, search tree ($TREE_FILES files)"
rm -rf "$WORK/crun"
mkdir -p "$WORK/crun/rootfs/bin" "$WORK/crun/cold" "$WORK/crun/warm" "$WORK/crun/state"
cp /bin/busybox "$WORK/crun/rootfs/bin/"
for a in sh true sleep; do ln -s busybox "$WORK/crun/rootfs/bin/$a"; done
(cd "$WORK/crun/cold" && crun spec)
/usr/bin/python3 - "$WORK/crun" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/cold/config.json"))
c["process"]["terminal"] = False
c["root"]["path"] = f"{d}/rootfs"
c["process"]["args"] = ["/bin/true"]
json.dump(c, open(f"{d}/cold/config.json", "w"), indent=1)
c["process"]["args"] = ["/bin/sleep", "1000000"]
json.dump(c, open(f"{d}/warm/config.json", "w"), indent=1)
PY

# the scopes the cases use (an acquire creates the sandbox and its user-data folders)
for t in warm-cli warm-skip warm-lib warm-cycle files search; do
  "${SBX[@]}" exec -u bench -t "$t" -- true
done
FILES=$USERDATA/files/user-data/workspace
for s in 4k:4096 1m:1048576 100m:104857600; do
  /usr/bin/python3 -c 'import sys
n = int(sys.argv[2])
line = b"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk\n"
open(sys.argv[1], "wb").write((line * (n // 64 + 1))[:n])' "$WORK/src-${s%%:*}.txt" "${s##*:}"
  cp "$WORK/src-${s%%:*}.txt" "$FILES/f-${s%%:*}.txt"
done
mkdir -p "$FILES/ls2000"
(cd "$FILES/ls2000" && for i in $(seq 0 1999); do : >"e$i.txt"; done)
# kept between runs (stamped by gentree.py), one per size
TREE=$USERDATA/search/user-data/workspace/tree-$TREE_FILES
VTREE=/mnt/user-data/workspace/tree-$TREE_FILES
VF=/mnt/user-data/workspace
/usr/bin/python3 "$ROOT/bench/gentree.py" "$TREE" "$TREE_FILES"

# warm peers: a bwrap sandbox (the nsenter target) and a running crun container
"${BWRAP[@]}" sleep infinity </dev/null >/dev/null 2>&1 &
BWRAP_PID=$!
descendant() { # PID COMM: the first descendant of PID whose command name is COMM
  local c
  for c in $(ps -o pid= --ppid "$1"); do
    if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = "$2" ]; then
      echo "$c"
      return 0
    fi
    descendant "$c" "$2" && return 0
  done
  return 1
}
NS_PID=
for _ in $(seq 100); do
  NS_PID=$(descendant "$BWRAP_PID" sleep || true)
  [ -n "$NS_PID" ] && break
  sleep 0.05
done
[ -n "$NS_PID" ] || { log "the warm bwrap sandbox did not start"; exit 1; }
unshare -m --propagation private sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec "$@"' sh \
  "${CRUN[@]}" run -d -b "$WORK/crun/warm" tbwarm </dev/null >/dev/null

# sbxd, when it has been built
SBXD_URL=${BENCH_SBXD_URL:-}
if [ -z "$SBXD_URL" ] && [ -x "$B/sbxd" ]; then
  cmd=${SBXD_CMD:-"$B/sbxd --home {home} --config {config}"}
  cmd=${cmd//\{home\}/$HS}
  cmd=${cmd//\{config\}/$CFGS}
  log "starting sbxd: $cmd"
  $cmd >"$WORK/sbxd.log" 2>&1 &
  SBXD_PID=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$SBXD_PORT") 2>/dev/null; then
      SBXD_URL=http://127.0.0.1:$SBXD_PORT
      break
    fi
    sleep 0.05
  done
  [ -n "$SBXD_URL" ] || log "sbxd did not listen on $SBXD_PORT; its rows are skipped ($WORK/sbxd.log)"
elif [ -z "$SBXD_URL" ]; then
  log "no $B/sbxd: the sbxd rows are skipped"
fi
echo "sbxd=${SBXD_URL:-absent}" >>"$RES/meta.env"
SBXD_COLD=() SBXD_WARM=()
if [ -n "$SBXD_URL" ]; then
  SBXD_COLD=(--- sbxd-cold @sbxd-cold "$SBXD_URL" true)
  SBXD_WARM=(--- sbxd-exec @sbxd-exec "$SBXD_URL" true)
fi

# ---- 5. the cases (tb interleaves the cases of a group round-robin) ----
group cold "$COLD_N" "$COLD_T" -P -t 30 -- \
  floor /bin/true --- \
  sbx-cli-run "${SBX[@]}" run -- true --- \
  sbx-lib-run @sbx-run "$H" "$CFG" true --- \
  sbx-cli-run-spares "${SBXS[@]}" run -- true --- \
  sbx-lib-run-spares @sbx-run "$HS" "$CFGS" true --- \
  bwrap "${BWRAP[@]}" /bin/true --- \
  unshare "${UNSHARE[@]}" /bin/true --- \
  crun-run "${CRUN[@]}" run -b "$WORK/crun/cold" tbc%N "${SBXD_COLD[@]}"

# the same after an idle pause before every run (PAUSE_MS): the kernel's cgroup attach lock is
# idle again then, as between an agent's calls (see the Profiles section of the report)
PAUSE_MS=60
group cold-idle "$IDLE_N" "$IDLE_T" -P -t 30 -s "$PAUSE_MS" -- \
  floor /bin/true --- \
  sbx-cli-run "${SBX[@]}" run -- true --- \
  sbx-lib-run @sbx-run "$H" "$CFG" true --- \
  sbx-cli-run-spares "${SBXS[@]}" run -- true --- \
  sbx-lib-run-spares @sbx-run "$HS" "$CFGS" true --- \
  bwrap "${BWRAP[@]}" /bin/true --- \
  unshare "${UNSHARE[@]}" /bin/true --- \
  crun-run "${CRUN[@]}" run -b "$WORK/crun/cold" tbi%N "${SBXD_COLD[@]}"

group first "$FIRST_N" "$FIRST_T" -t 30 -s "$PAUSE_MS" -- \
  floor /bin/true --- \
  sbx-cli-first "@after=$(printf '%q ' "${SBX[@]}") rm -u bench -t cf%N" \
  "${SBX[@]}" exec -u bench -t cf%N -- true --- \
  sbx-lib-first @sbx-first "$H" "$CFG" bench lf true --- \
  sbx-cli-first-spares "@after=$(printf '%q ' "${SBXS[@]}") rm -u bench -t cs%N" \
  "${SBXS[@]}" exec -u bench -t cs%N -- true --- \
  sbx-lib-first-spares @sbx-first "$HS" "$CFGS" bench ls true --- \
  bwrap "${BWRAP[@]}" /bin/true
"${SBXS[@]}" down >/dev/null

group warm "$WARM_N" "$WARM_T" -P -t 20 -- \
  floor /bin/true --- \
  sbx-cli-exec "${SBX[@]}" exec -u bench -t warm-cli -- true --- \
  sbx-cli-exec-skip "${SBXK[@]}" exec -u bench -t warm-skip -- true --- \
  sbx-lib-cycle @sbx-cycle "$H" "$CFG" bench warm-cycle true --- \
  sbx-lib-exec @sbx-exec "$H" "$CFG" bench warm-lib true --- \
  sbx-lib-exec-argv @sbx-exec-argv "$H" "$CFG" bench warm-lib /bin/true --- \
  sbx-lib-exec-bash @sbx-exec-argv "$H" "$CFG" bench warm-lib /bin/bash -c true --- \
  nsenter-bwrap nsenter -t "$NS_PID" -a /bin/true --- \
  crun-exec "${CRUN[@]}" exec tbwarm /bin/true "${SBXD_WARM[@]}"

for s in 4k 1m 100m; do
  case $s in
  4k) n=$F4K_N t=$FILE_T size=4096 w=$WARMUP ;;
  1m) n=$F1M_N t=$FILE_T size=1048576 w=$WARMUP ;;
  *) n=$F100M_N t=$F100M_T size=104857600 w=1 ;;
  esac
  group "file-$s" "$n" "$t" -w "$w" -t 120 -- \
    sbx-cli-write "@stdin=$WORK/src-$s.txt" "${SBX[@]}" write -u bench -t files "$VF/f-$s.txt" --- \
    sbx-lib-write @sbx-write "$H" "$CFG" bench files "$VF/f-$s.txt" "$size" --- \
    host-write @host-write "$FILES/h-$s.txt" "$size" --- \
    dd-write dd if="$WORK/src-$s.txt" of="$FILES/d-$s.txt" bs=1M conv=fsync status=none --- \
    sbx-cli-read "${SBX[@]}" read -u bench -t files "$VF/f-$s.txt" --- \
    sbx-lib-read @sbx-read "$H" "$CFG" bench files "$VF/f-$s.txt" --- \
    host-read @host-read "$FILES/f-$s.txt" --- \
    cat-read cat "$FILES/f-$s.txt"
done

# The seeds' remote approach (DeerFlow's remote_list_dir_command and remote_search_command,
# contract §1.6 and §5.3) run by a busybox shell with busybox tools. The Python filtering that
# follows it in DeerFlow is not timed (in the seeds' favour).
SEEDS_LS=$RES/seeds-list-dir.sh SEEDS_GLOB=$RES/seeds-glob.sh SEEDS_GREP=$RES/seeds-grep.sh
seeds_search() { # FILE SEARCH LIMIT
  printf '( set +e; if [ ! -e %s ]; then printf '"'"'%%s\\n'"'"' __DF_SEARCH_STATUS__:missing; exit 0; fi; _st=/tmp/df_search_$$; { %s; echo $? > "$_st"; } | busybox head -n %d; st=$(busybox cat "$_st" 2>/dev/null); busybox rm -f "$_st"; printf '"'"'\\n%%s\\n'"'"' __DF_SEARCH_STATUS__:"$st"; exit 0 )\n' \
    "$TREE" "$2" "$(($3 + 1))" >"$1"
}
printf '( set +e; _st=/tmp/df_find_$$; { busybox find -H %s -maxdepth 2 \\( -type f -o -type d \\) 2>/dev/null; echo $? > "$_st"; } | busybox head -n 500; st=$(busybox cat "$_st" 2>/dev/null); printf '"'"'\\n%%s\\n'"'"' __DF_FIND_STATUS__:$st; busybox rm -f "$_st"; exit "${st:-126}" )\n' \
  "$FILES/ls2000" >"$SEEDS_LS"
seeds_search "$SEEDS_GLOB" "busybox find -H $TREE \\( -type f \\) -print 2>/dev/null" 800
seeds_search "$SEEDS_GREP" "busybox grep -r -H -n -i -E needle_7f3a $TREE" 400

group list-2000 "$LS_N" "$LS_T" -- \
  sbx-cli-ls "${SBX[@]}" ls -u bench -t files "$VF/ls2000" --- \
  sbx-lib-ls @sbx-ls "$H" "$CFG" bench files "$VF/ls2000" 2 --- \
  host-ls @host-ls "$FILES/ls2000" --- \
  gnu-ls ls -1 -p "$FILES/ls2000" --- \
  seeds-busybox busybox sh "$SEEDS_LS"

group glob "$GLOB_N" "$GLOB_T" -t "$SEARCH_TIMEOUT" -- \
  sbx-cli-glob "${SBX[@]}" glob -u bench -t search "$VTREE" '*.rs' --- \
  sbx-lib-glob @sbx-glob "$H" "$CFG" bench search "$VTREE" '*.rs' 200 --- \
  gnu-find find "$TREE" -name node_modules -prune -o -name .git -prune -o -type f -name '*.rs' -print --- \
  gnu-find-all find "$TREE" -type f -name '*.rs' --- \
  rg-files rg --files --no-ignore --hidden -g '*.rs' -g '!node_modules' -g '!.git' "$TREE" --- \
  seeds-busybox busybox sh "$SEEDS_GLOB"

group grep "$GREP_N" "$GREP_T" -t "$SEARCH_TIMEOUT" -- \
  sbx-cli-grep "${SBX[@]}" grep -u bench -t search "$VTREE" needle_7f3a --- \
  sbx-lib-grep @sbx-grep "$H" "$CFG" bench search "$VTREE" needle_7f3a 100 --- \
  gnu-grep grep -r -H -n -I -i -E --exclude-dir=node_modules --exclude-dir=.git needle_7f3a "$TREE" --- \
  gnu-grep-all grep -r -H -n -I -i -E needle_7f3a "$TREE" --- \
  rg rg -n -i --no-ignore --hidden -g '!node_modules' -g '!.git' needle_7f3a "$TREE" --- \
  seeds-busybox busybox sh "$SEEDS_GREP"

# what each search approach answers (the seeds' capped output, filtered as DeerFlow does)
{
  exp_glob=$(find "$TREE" -name node_modules -prune -o -name .git -prune -o -type f -name '*.rs' -print | wc -l)
  exp_grep=$(grep -r -I -i -E --exclude-dir=node_modules --exclude-dir=.git needle_7f3a "$TREE" | wc -l)
  got_sbx_glob=$("${SBX[@]}" glob -u bench -t search "$VTREE" '*.rs' 2>/dev/null | wc -l)
  got_sbx_grep=$("${SBX[@]}" grep -u bench -t search "$VTREE" needle_7f3a 2>/dev/null | wc -l)
  got_seeds_glob=$(busybox sh "$SEEDS_GLOB" | grep -v -e /node_modules/ -e /.git/ | grep -c '\.rs$' || true)
  got_seeds_grep=$(busybox sh "$SEEDS_GREP" | grep -v -e /node_modules/ -e /.git/ | grep -c -i needle_7f3a || true)
  printf 'glob\t%s\t%s\t%s\n' "$exp_glob" "$got_sbx_glob" "$got_seeds_glob"
  printf 'grep\t%s\t%s\t%s\n' "$exp_grep" "$got_sbx_grep" "$got_seeds_grep"
} >"$RES/search-answers.tsv"

# ---- 6. density, then scale on the same warm pool ----
log "density: idle bwrap, then idle sbx sandboxes, at ${DENSITY_COUNTS// /, }"
"${SBX[@]}" down >/dev/null
export DENSITY_SETTLE_S=$SETTLE_S
/usr/bin/python3 "$ROOT/bench/density.py" bwrap "$RES/density.tsv" "$DENSITY_COUNTS" -- \
  "${BWRAP[@]}" sleep infinity
/usr/bin/python3 "$ROOT/bench/density.py" sbx "$RES/density.tsv" "$DENSITY_COUNTS" -- \
  "$SBXBENCH" "$B/sbx" "$H" "$CFG"
log "scale: $SCALE_SCOPES warm sandboxes, 8 clients, ${SCALE_S}s per mode"
for run in lib:0 cli:0 lib:$SCALE_RATE cli:$SCALE_RATE; do
  before=$(loadavg)
  "$SBXBENCH" scale "$H" "$CFG" bench d "$SCALE_SCOPES" 8 "$SCALE_S" "${run%%:*}" "$RES/scale.tsv" \
    "$B/sbx" "${run##*:}" | tee -a "$RES/scale-summary.txt" || true
  printf 'scale-%s\t%s\t%s\n' "$run" "$before" "$(loadavg)" >>"$LOADS"
done
# creating a sandbox when the pool is large (the replica cap looks at every sandbox)
group "cold-$SCALE_SCOPES" "$POOL_N" "$POOL_T" -t 30 -- \
  floor /bin/true --- \
  sbx-cli-run "${SBX[@]}" run -- true --- \
  sbx-lib-run @sbx-run "$H" "$CFG" true --- \
  sbx-lib-first @sbx-first "$H" "$CFG" bench pf true --- \
  bwrap "${BWRAP[@]}" /bin/true
"${SBX[@]}" down >/dev/null

# ---- 7. cross-check and profiles (optional) ----
if [ "$HYPERFINE" = 1 ] || [ "$PROFILE" = 1 ]; then
  "${SBX[@]}" exec -u bench -t warm-cli -- true
fi
if [ "$HYPERFINE" = 1 ]; then
  log "hyperfine cross-check (not interleaved)"
  hyperfine -N -w 5 -r 100 --export-json "$RES/hyperfine.json" \
    -n floor /bin/true \
    -n sbx-cli-run "$(printf '%q ' "${SBX[@]}") run -- true" \
    -n bwrap "$(printf '%q ' "${BWRAP[@]}") /bin/true" \
    -n sbx-cli-exec "$(printf '%q ' "${SBX[@]}") exec -u bench -t warm-cli -- true" \
    -n nsenter-bwrap "nsenter -t $NS_PID -a /bin/true" >/dev/null 2>"$WORK/hyperfine.err" ||
    log "hyperfine failed: $(tail -1 "$WORK/hyperfine.err")"
fi
if [ "$PROFILE" = 1 ]; then
  log "profiles"
  BENCH_BUILD=$B "$ROOT/bench/profile.sh" "$H" "$CFG" "$RES" || log "profiling failed"
fi
echo "load_end=$(loadavg)" >>"$RES/meta.env"
echo "elapsed_s=$(($(date +%s) - T0))" >>"$RES/meta.env"

# ---- 8. report ----
log "report"
"$ROOT/bench/report.sh" "$RES"
log "done in $(($(date +%s) - T0)) s: bench/README.md"
