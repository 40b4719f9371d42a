#!/usr/bin/env bash
# The SDK tests: the official OpenSandbox TypeScript SDK (pinned in package.json and
# package-lock.json) against $SBX_BUILD/sbxd, with node's own test runner.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@alibaba-group/opensandbox ]; then
  npm ci --silent --no-audit --no-fund
fi
exec node --test lifecycle.test.mjs commands.test.mjs files.test.mjs egress.test.mjs
