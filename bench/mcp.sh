#!/usr/bin/env bash
# MCP tool-call latency (bench/mcp.py): execute_command `true` over `sbx mcp` (stdio) and sbxd's
# /mcp (streamable HTTP), against `sbx exec -- true` and sbx_execute_command, interleaved, on the
# release build. Not part of bench/run.sh (run it alone: it takes about a minute).
#
#   bench/mcp.sh [-n SAMPLES] [--json FILE]      (BUILD=DIR, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -x "$BUILD/sbx" ] && [ -x "$BUILD/sbxd" ] && [ -f "$BUILD/libsbx.so" ] || {
  echo "bench/mcp.sh: build first (make build)" >&2
  exit 1
}
exec python3 bench/mcp.py --build "$BUILD" "$@"
