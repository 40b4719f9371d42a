#!/usr/bin/env bash
# The MCP tests: the official MCP TypeScript SDK (pinned in package.json and package-lock.json)
# as the client of `$SBX_BUILD/sbx mcp` (stdio) and of sbxd's /mcp (streamable HTTP), with
# node's own test runner.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@modelcontextprotocol/sdk ]; then
  npm ci --silent --no-audit --no-fund
fi
exec node --test --test-concurrency=1 tools.test.mjs protocol.test.mjs
