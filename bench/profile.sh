#!/bin/bash
# bench/profile.sh HOME CONFIG RESULTS: profiles of sbx's two hot paths,
#   run:  sbx run -- true                    (cold start: a sandbox made, used, destroyed)
#   exec: sbx exec -u bench -t prof -- true  (warm exec in a parked sandbox)
# For each path, into RESULTS:
#   profile-PATH-comm.txt      perf CPU samples (kernel + user) split by process
#   profile-PATH-self.txt      perf: hottest functions by self time
#   profile-PATH-children.txt  perf: functions by inclusive time (kernel paths: clone, mount...)
#   profile-PATH-syscalls.tsv  perf trace -s: wall time per syscall per process (blocking shows)
#   profile-PATH-strace-top.tsv the longest syscalls of one run after an idle pause (strace -f -y
#                              -T: with the files they act on and the process making them)
#   profile-PATH-callgrind.txt callgrind (instructions) of the sbx CLI process itself
# and profile-cgroup-attach.tsv: how long moving a process into a v1 cgroup takes, by method.
# perf samples cpu-clock (software event: this VM has no PMU); all processes the loop starts,
# including the sandbox's own (the exec path's sandbox is created inside the recorded loop).
set -eu # no pipefail: `perf report | head` ends with SIGPIPE
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BUILD:-$ROOT/build-bench}
H=$1 CFG=$2 RES=$3
N=${PROFILE_RUNS:-200}
WORK=$(mktemp -d /tmp/sbx-profile.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export SBX_INIT=$B/sbx-init
SBX=("$B/sbx" --home "$H" --config "$CFG")
TB=$B/bench/tb

for path in run exec; do
  if [ "$path" = run ]; then
    CMD=("${SBX[@]}" run -- true)
  else
    "${SBX[@]}" rm -u bench -t prof >/dev/null 2>&1 || true
    CMD=("${SBX[@]}" exec -u bench -t prof -- true)
  fi
  perf record -q -F 2999 -g -o "$WORK/perf.data" -- "$TB" -n "$N" -w 1 -q -- "$path" "${CMD[@]}" \
    >/dev/null 2>&1
  rep() { perf report -i "$WORK/perf.data" --stdio -g none "$@" 2>/dev/null | grep -v '^#' | grep -v '^$'; }
  rep --no-children --sort comm,dso | head -25 >"$RES/profile-$path-comm.txt"
  rep --no-children --sort comm,sym | head -40 >"$RES/profile-$path-self.txt"
  rep --children --sort sym | head -60 >"$RES/profile-$path-children.txt"
  echo "runs=$N" >>"$RES/profile-$path-comm.txt"
  [ "$path" = exec ] && "${SBX[@]}" rm -u bench -t prof >/dev/null 2>&1
  [ "$path" = exec ] && "${SBX[@]}" exec -u bench -t prof -- true # parked warm for the traces
  perf trace -s -o "$WORK/trace.txt" -- "$TB" -n 20 -w 1 -q -- "$path" "${CMD[@]}" \
    >/dev/null 2>&1 || true
  /usr/bin/python3 "$ROOT/bench/report.py" --trace-summary "$WORK/trace.txt" \
    "$RES/profile-$path-syscalls.tsv" 21 || true
  sleep 0.5 # let the kernel's RCU state go idle, as between an agent's calls
  strace -f -y -tt -T -o "$WORK/strace.txt" -- "${CMD[@]}" >/dev/null 2>&1 || true
  /usr/bin/python3 "$ROOT/bench/report.py" --strace-top "$WORK/strace.txt" \
    "$RES/profile-$path-strace-top.tsv" || true
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "${CMD[@]}" >/dev/null 2>&1 || true
  callgrind_annotate "$WORK/cg.out" 2>/dev/null | head -45 >"$RES/profile-$path-callgrind.txt" || true
done
"${SBX[@]}" rm -u bench -t prof >/dev/null 2>&1 || true
/usr/bin/python3 "$ROOT/bench/cgattach.py" >"$RES/profile-cgroup-attach.tsv" || true
