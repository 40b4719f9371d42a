#!/bin/sh
# bench/report.sh [RESULTS]: regenerates bench/README.md and bench/plots/*.png from the samples
# of the last run (bench/results/ by default). Needs python3 and gnuplot; runs nothing else.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec /usr/bin/python3 "$ROOT/bench/report.py" "${1:-$ROOT/bench/results}" "$ROOT/bench"
