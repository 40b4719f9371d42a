// Test harness: MCP clients (the official SDK) connected to `sbx mcp` over stdio, or to a
// fresh sbxd's /mcp over streamable HTTP. Every server gets a temporary home; leftover sandboxes
// are destroyed with `sbx down`, and sbxd must exit cleanly (a sanitizer report fails the test).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const BUILD = process.env.SBX_BUILD || path.resolve(here, "../../build");
export const SBXD = path.join(BUILD, "sbxd");
export const SBX = path.join(BUILD, "sbx");
export const API_KEY = "mcp-test-key";

export function tempHome() {
  return mkdtempSync(path.join(os.tmpdir(), "sbx-mcp-"));
}

export function cleanHome(home) {
  spawnSync(SBX, ["--home", home, "down"], { stdio: "ignore" });
  rmSync(home, { recursive: true, force: true });
}

export async function startSbxd({ apiKey = API_KEY } = {}) {
  const home = tempHome();
  const argv = ["--listen", "127.0.0.1:0", "--home", home];
  if (apiKey) argv.push("--api-key", apiKey);
  const env = { ...process.env };
  delete env.OPEN_SANDBOX_API_KEY;
  const child = spawn(SBXD, argv, { stdio: ["ignore", "ignore", "pipe"], env });
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
        let rec;
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
  return {
    home,
    logs,
    url: `http://${address}/mcp`,
    async stop() {
      child.kill("SIGTERM");
      const { code, signal } = await exited;
      cleanHome(home);
      const raw = logs.filter((l) => l.raw !== undefined).map((l) => l.raw).join("\n");
      assert.equal(signal, null, `sbxd died of ${signal}\n${raw}`);
      assert.equal(code, 0, `sbxd exited with ${code}\n${raw}`);
    },
  };
}

// A connected SDK client. kind "stdio": `sbx mcp [args]` with home; kind "http": server.url,
// with headers (the scope: Sbx-User / Sbx-Thread).
export async function connect(kind, { home, server, args = [], headers = {} } = {}) {
  const client = new Client({ name: "sbx-mcp-test", version: "1.0.0" });
  let transport;
  let stderr = "";
  if (kind === "stdio") {
    transport = new StdioClientTransport({
      command: SBX,
      args: ["--home", home, "mcp", ...args],
      env: { ...process.env },
      stderr: "pipe",
    });
    transport.stderr?.on("data", (d) => (stderr += d));
  } else {
    transport = new StreamableHTTPClientTransport(new URL(server.url), {
      requestInit: { headers: { Authorization: `Bearer ${API_KEY}`, ...headers } },
    });
  }
  await client.connect(transport);
  client.stderrText = () => stderr;
  return client;
}

// Runs fn(open) where open(opts) connects a client of that kind; everything is torn down after.
export async function withServer(kind, fn) {
  const clients = [];
  let server = null;
  let home = null;
  if (kind === "http") server = await startSbxd();
  else home = tempHome();
  const open = async (opts = {}) => {
    const c = await connect(kind, { home, server, ...opts });
    clients.push(c);
    return c;
  };
  try {
    await fn(open, { server, home });
  } finally {
    for (const c of clients) await c.close().catch(() => {});
    if (server) await server.stop();
    else cleanHome(home);
  }
}

export function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

export async function call(client, name, args = {}, opts = {}) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: 120000, ...opts });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
