#!/usr/bin/env bash
# The SDK tests: the official OpenSandbox TypeScript SDK (pinned in package.json and
# package-lock.json) against $SBX_BUILD/sbxd, with node's own test runner. Then the commands and
# files suites once more with sandboxes made from an OCI image (image.uri busybox:test, built
# offline by tests/images/mkimage.py and imported into each sbxd's home).
set -euo pipefail
cd "$(dirname "$0")"
# no registry is reachable from the tests: an unknown image is a 400, not a 202 Pending pull
export SBX_PULL=${SBX_PULL:-never}
if [ ! -d node_modules/@alibaba-group/opensandbox ] || [ ! -d node_modules/ws ]; then
  npm ci --silent --no-audit --no-fund
fi
node --test lifecycle.test.mjs commands.test.mjs files.test.mjs pty.test.mjs egress.test.mjs snapshots.test.mjs
img_dir=$(mktemp -d)
trap 'rm -rf "$img_dir"' EXIT
python3 ../images/mkimage.py "$img_dir/busybox.tar" --name busybox:test --sdk >/dev/null
SBX_SDK_IMAGE=busybox:test SBX_SDK_IMAGE_ARCHIVE="$img_dir/busybox.tar" \
  node --test commands.test.mjs files.test.mjs
