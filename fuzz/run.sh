#!/usr/bin/env bash
# Builds every libFuzzer target with clang (in build-fuzz) and runs each for SECONDS (default 60;
# CI uses ~5) over a copy of its seed corpus. Fails on any crash, sanitizer report, leak or
# time-out; the input that did it is kept in build-fuzz/fuzz-artifacts/ (add it to
# fuzz/corpus/<name>/ with the fix, as a regression seed).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Environment: BUILD_DIR (default build-fuzz), CC (default clang-14 or clang), JOBS, FUZZ_ARGS
# (extra libFuzzer flags). Seeds are never modified: new inputs go to the copy.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-60}
shift || true
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
if [ -z "${CC:-}" ]; then
  CC=$(command -v clang-14 || command -v clang || true)
fi
if [ -z "$CC" ]; then
  echo "fuzz/run.sh: clang is needed (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

# every fuzz/fuzz_*.c is a target (fuzz/CMakeLists.txt builds them all)
TARGETS=()
for f in fuzz/fuzz_*.c; do
  TARGETS+=("$(basename "$f" .c)")
done
if [ $# -gt 0 ]; then
  TARGETS=("$@")
fi

CC="$CC" cmake -S . -B "$BUILD_DIR" -DSBX_FUZZ=ON -DSBX_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug \
  >/dev/null
cmake --build "$BUILD_DIR" --target fuzz_all -j "$JOBS" >/dev/null

work="$BUILD_DIR/fuzz-work"
artifacts="$BUILD_DIR/fuzz-artifacts"
rm -rf "$work"
mkdir -p "$work" "$artifacts"
failed=()
printf '%-20s %8s %10s %8s  %s\n' target seconds runs corpus result
for t in "${TARGETS[@]}"; do
  name=${t#fuzz_}
  seeds="fuzz/corpus/$name"
  corpus="$work/$name"
  if [ -d "$seeds" ]; then
    cp -r "$seeds" "$corpus"
  else
    echo "fuzz/run.sh: warning: $t has no seed corpus ($seeds): starting from nothing" >&2
    mkdir -p "$corpus"
  fi
  log="$work/$name.log"
  # the grep target compiles regexes: give single inputs time; keep memory bounded
  set +e
  (cd "$work" && "../fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=25 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="../fuzz-artifacts/$t-" ${FUZZ_ARGS:-} "$name") >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  size=$(find "$corpus" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc, see $log)"
    failed+=("$t")
    grep -E 'ERROR: |SUMMARY: |Test unit written' "$log" | head -5 | sed 's/^/    /' >&2 || true
  fi
  printf '%-20s %8s %10s %8s  %s\n' "$t" "$SECONDS_PER_TARGET" "$runs" "$size" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz/run.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz/run.sh: ${#TARGETS[@]} targets, no crash"
