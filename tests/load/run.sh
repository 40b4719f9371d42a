#!/usr/bin/env bash
# Bounded load test (loopback only, stops by itself; not part of `make check`). Prints a table:
# throughput, p50/p99 latency and errors per phase, memory before/after, leftovers.
#
#   tests/load/run.sh [--sandboxes N] [--execs N] [--fileops N] [--workers N] [--mode cli|sbxd]
#
# Defaults: 200 sandboxes, 2000 commands, 2000 file operations, 4 x CPUs workers, the CLI.
# Binaries from $SBX_BUILD, else ./build. Exit status 0 only with 0 errors and nothing left.
set -euo pipefail
cd "$(dirname "$0")/../.."
export SBX_BUILD=${SBX_BUILD:-$PWD/build}
exec /usr/bin/python3 tests/load/load.py "$@"
