// Test harness: every test starts its own sbxd on 127.0.0.1 with an ephemeral port and a
// temporary --home, drives it with the official OpenSandbox SDK, and stops it (asserting a clean
// exit, so a sanitizer report fails the test). Leftover sandboxes are destroyed with `sbx down`.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

const here = path.dirname(fileURLToPath(import.meta.url));
export const BUILD = process.env.SBX_BUILD || path.resolve(here, "../../build");
export const SBXD = path.join(BUILD, "sbxd");
export const SBX = path.join(BUILD, "sbx");
// run.sh's second pass: an OCI image (tests/images/mkimage.py's busybox), imported into every
// sbxd's home before it starts
export const IMAGE = process.env.SBX_SDK_IMAGE || "host";
const IMAGE_ARCHIVE = process.env.SBX_SDK_IMAGE_ARCHIVE;

// fakenet: run sbxd inside the fake internet of the network tests (fakenet_sbxd.py; root only)
export async function startSbxd({ apiKey = "sdk-test-key", args = [], fakenet = false } = {}) {
  const home = mkdtempSync(path.join(os.tmpdir(), "sbxd-sdk-"));
  const argv = ["--listen", "127.0.0.1:0", "--home", home, ...args];
  if (apiKey) argv.push("--api-key", apiKey);
  const env = { ...process.env };
  delete env.OPEN_SANDBOX_API_KEY;
  if (IMAGE_ARCHIVE) {
    const imp = spawnSync(SBX, ["--home", home, "image", "import", IMAGE_ARCHIVE], { encoding: "utf8" });
    assert.equal(imp.status, 0, `sbx image import: ${imp.stderr}`);
  }
  const child = fakenet
    ? spawn("python3", [path.join(here, "fakenet_sbxd.py"), SBXD, ...argv], { stdio: ["ignore", "ignore", "pipe"], env })
    : spawn(SBXD, argv, { stdio: ["ignore", "ignore", "pipe"], env });
  const logs = [];
  let text = "";
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const address = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sbxd did not start:\n${text}`)), 30000);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      text += chunk;
      let nl;
      while ((nl = text.indexOf("\n")) >= 0) {
        const line = text.slice(0, nl);
        text = text.slice(nl + 1);
        let rec = null;
        try {
          rec = JSON.parse(line);
        } catch {
          rec = { raw: line };
        }
        logs.push(rec);
        if (rec.msg === "listening") {
          clearTimeout(timer);
          resolve(rec.address);
        }
      }
    });
    exited.then(({ code }) => reject(new Error(`sbxd exited (${code}):\n${text}`)));
  });
  const server = {
    home,
    address,
    apiKey,
    logs,
    child,
    config(opts = {}) {
      return new ConnectionConfig({
        domain: address,
        protocol: "http",
        apiKey,
        requestTimeoutSeconds: 60,
        ...opts,
      });
    },
    async stop() {
      child.kill("SIGTERM");
      const { code, signal } = await exited;
      spawnSync(SBX, ["--home", home, "down"], { stdio: "ignore" });
      rmSync(home, { recursive: true, force: true });
      const raw = logs.filter((l) => l.raw !== undefined).map((l) => l.raw).join("\n");
      assert.equal(signal, null, `sbxd died of ${signal}\n${raw}`);
      assert.equal(code, 0, `sbxd exited with ${code}\n${raw}`);
    },
  };
  return server;
}

// Runs fn(server) against a fresh sbxd.
export async function withSbxd(opts, fn) {
  const server = await startSbxd(opts);
  try {
    await fn(server);
  } finally {
    await server.stop();
  }
}

// Runs fn(sandbox, server) with a sandbox created through the SDK (killed afterwards).
export async function withSandbox(opts, fn) {
  const { useServerProxy = false, sbxd = {}, ...create } = opts;
  await withSbxd(sbxd, async (server) => {
    const sandbox = await Sandbox.create({
      connectionConfig: server.config({ useServerProxy }),
      image: IMAGE,
      timeoutSeconds: 20 * 60,
      readyTimeoutSeconds: 30,
      entrypoint: ["tail", "-f", "/dev/null"],
      healthCheckPollingInterval: 100,
      ...create,
    });
    try {
      await fn(sandbox, server);
      // every execd request took the route of the mode under test
      const execd = server.logs.filter(
        (l) => l.msg === "request" && /\/(direct|proxy)\/[0-9a-f]{16}\/44772|\/proxy\/44772/.test(l.path),
      );
      const viaProxy = (l) => l.path.includes(`/sandboxes/${sandbox.id}/proxy/44772`);
      assert.ok(execd.length > 0, "no execd request was logged");
      assert.ok(
        execd.every((l) => viaProxy(l) === useServerProxy),
        `execd requests did not all use the ${useServerProxy ? "proxy" : "direct"} route`,
      );
    } finally {
      await sandbox.kill().catch(() => {});
      await sandbox.close().catch(() => {});
    }
  });
}

export function assertRecentTimestampMs(ts, toleranceMs = 60_000) {
  assert.equal(typeof ts, "number");
  assert.ok(Math.abs(Date.now() - ts) <= toleranceMs, `timestamp ${ts} is not recent`);
}

export function assertEndpointHasPort(endpoint, port) {
  assert.ok(!endpoint.includes("://"), `endpoint has a scheme: ${endpoint}`);
  assert.ok(endpoint.endsWith(`:${port}`) || endpoint.endsWith(`/${port}`), endpoint);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const MODES = [
  { name: "direct", useServerProxy: false },
  { name: "server proxy", useServerProxy: true },
];
