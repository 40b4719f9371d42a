#!/bin/sh
# Builds sbx (Release, in $BENCH_BUILD, default build-bench) and the bench programs
# ($BENCH_BUILD/bench/tb, sbxbench) with the repo's warning flags (cmake/warnings.cmake).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BUILD:-$ROOT/build-bench}
JOBS=${JOBS:-2}

cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$B" -j "$JOBS" >/dev/null

# The warning list is the repo's: read it from cmake/warnings.cmake so both stay in step.
WARN=$(sed -n '/set(SBX_WARNINGS/,/)/p' "$ROOT/cmake/warnings.cmake" | tr -d '()' |
  sed 's/set//; s/SBX_WARNINGS//' | tr '\n' ' ')
CC=${CC:-cc}
CFLAGS="-std=gnu17 -O2 -g -D_GNU_SOURCE $WARN -I$ROOT/include -I$ROOT/src/common"
LIBS="$B/libsbx.a $B/libsbx_common.a $(pkg-config --libs jansson yaml-0.1) -lpthread -lm"
mkdir -p "$B/bench"
# shellcheck disable=SC2086
$CC $CFLAGS -o "$B/bench/tb" "$ROOT/bench/tb.c" "$ROOT/bench/tb_builtins.c" "$ROOT/bench/http.c" $LIBS
# shellcheck disable=SC2086
$CC $CFLAGS -o "$B/bench/sbxbench" "$ROOT/bench/sbxbench.c" $LIBS
