// sbxd's PTY sessions (OpenSandbox's components/execd/PTY.md) driven by the `ws` client from npm:
// create, input and echo, resize seen by `stty size`, ctrl-c to the foreground process, the exit
// frame, drop and reconnect with since=, takeover, grace expiry, the per-sandbox bound, the
// credentials, and malformed frames closed with RFC 6455's codes. The OpenSandbox JS SDK has no
// PTY or stdin calls (checked in 0.1.11), so the protocol is spoken here directly.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import WebSocket from "ws";

import { sleep, withSbxd } from "./helpers.mjs";

const GRACE_S = 2;
const MAX_SESSIONS = 3;
const BUFFER = 8192;

function config() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sbxd-pty-"));
  const file = path.join(dir, "config.yaml");
  writeFileSync(
    file,
    `sbxd:\n  pty_grace: ${GRACE_S}\n  pty_max_sessions: ${MAX_SESSIONS}\n  pty_buffer: ${BUFFER}\n`,
  );
  return file;
}

async function api(server, method, p, body, headers = {}) {
  const res = await fetch(`http://${server.address}${p}`, {
    method,
    headers: { "OPEN-SANDBOX-API-KEY": server.apiKey, "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, json, text };
}

// A sandbox and its execd endpoint (base URL and the access token header).
async function sandbox(server) {
  const c = await api(server, "POST", "/v1/sandboxes", {
    image: { uri: "host" },
    entrypoint: ["tail", "-f", "/dev/null"],
    timeout: 600,
    resourceLimits: {},
  });
  assert.equal(c.status, 202, c.text);
  const id = c.json.id;
  for (let i = 0; i < 100; i++) {
    const g = await api(server, "GET", `/v1/sandboxes/${id}`);
    if (g.json?.status?.state === "Running") break;
    await sleep(100);
  }
  const e = await api(server, "GET", `/v1/sandboxes/${id}/endpoints/44772`);
  assert.equal(e.status, 200, e.text);
  return { id, base: `http://${e.json.endpoint}`, headers: e.json.headers };
}

async function execd(sb, method, p, body, headers = sb.headers) {
  const res = await fetch(`${sb.base}${p}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, json, text };
}

// A WebSocket to a session that collects output (replay and live) and JSON frames.
function connect(sb, sid, query = "", headers = sb.headers) {
  const url = `${sb.base.replace(/^http/, "ws")}/pty/${sid}/ws${query}`;
  const ws = new WebSocket(url, { headers });
  const st = { ws, out: "", replay: null, replayOffset: null, stderr: "", frames: [], close: null };
  ws.on("message", (data, isBinary) => {
    if (isBinary) {
      const b = Buffer.from(data);
      if (b[0] === 0x01) st.out += b.subarray(1).toString("latin1");
      else if (b[0] === 0x02) st.stderr += b.subarray(1).toString("latin1");
      else if (b[0] === 0x03) {
        st.replayOffset = Number(b.readBigInt64BE(1));
        st.replay = b.subarray(9).toString("latin1");
        st.out += st.replay;
      }
    } else {
      st.frames.push(JSON.parse(data.toString()));
    }
  });
  st.closed = new Promise((resolve) => ws.on("close", (code, reason) => resolve((st.close = { code, reason: reason.toString() }))));
  st.opened = new Promise((resolve, reject) => {
    ws.on("open", resolve);
    ws.on("unexpected-response", (req, res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body })));
    });
    ws.on("error", reject);
  });
  st.input = (s) => ws.send(Buffer.concat([Buffer.from([0x00]), Buffer.from(s)]));
  st.json = (o) => ws.send(JSON.stringify(o));
  st.waitFor = async (pred, what, ms = 15000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (pred(st)) return;
      await sleep(20);
    }
    assert.fail(`timed out waiting for ${what}; output so far: ${JSON.stringify(st.out)} frames ${JSON.stringify(st.frames)}`);
  };
  st.waitOut = (re, ms) => st.waitFor((s) => re.test(s.out), `output matching ${re}`, ms);
  return st;
}

async function createPty(sb, body = {}) {
  const r = await execd(sb, "POST", "/pty", body);
  assert.equal(r.status, 201, r.text);
  assert.match(r.json.session_id, /^[0-9a-f-]{36}$/);
  return r.json.session_id;
}

test("pty: echo, stty size after resize, ctrl-c, exit frame, status", async () => {
  await withSbxd({ args: ["--config", config()] }, async (server) => {
    const sb = await sandbox(server);
    const sid = await createPty(sb, { cwd: "/tmp" });
    let st = await execd(sb, "GET", `/pty/${sid}`);
    assert.deepEqual(st.json, { session_id: sid, running: false, output_offset: 0 });

    const c = connect(sb, sid);
    await c.opened;
    await c.waitFor((s) => s.frames.some((f) => f.type === "connected"), "connected");
    assert.deepEqual(c.frames[0], { type: "connected", session_id: sid, mode: "pty" });

    c.input("echo hel''lo-$((6*7)); pwd\n");
    await c.waitOut(/hello-42\r?\n\/tmp/);

    c.json({ type: "resize", cols: 123, rows: 45 });
    await sleep(100);
    c.input("stty size\n");
    await c.waitOut(/45 123/);

    // ctrl-c reaches the foreground process (sleep), not the shell
    c.input("sleep 30; echo not-interrupted\n");
    await sleep(300);
    const t0 = Date.now();
    c.input("\x03");
    c.input("echo after-int\n");
    await c.waitOut(/[\r\n]after-int\r\n/);
    assert.ok(Date.now() - t0 < 5000);
    assert.doesNotMatch(c.out, /[\r\n]not-interrupted\r\n/);
    // the signal frame does the same
    c.input("sleep 30; echo not-signalled\n");
    await sleep(300);
    c.json({ type: "signal", signal: "SIGINT" });
    c.input("echo after-signal\n");
    await c.waitOut(/[\r\n]after-signal\r\n/);
    assert.doesNotMatch(c.out, /[\r\n]not-signalled\r\n/);

    c.json({ type: "ping" });
    await c.waitFor((s) => s.frames.some((f) => f.type === "pong"), "pong");
    c.json({ type: "bogus" });
    await c.waitFor((s) => s.frames.some((f) => f.type === "error" && f.code === "INVALID_FRAME"), "INVALID_FRAME");

    st = await execd(sb, "GET", `/pty/${sid}`);
    assert.equal(st.json.running, true);
    assert.ok(st.json.output_offset > 0);

    c.input("exit 7\n");
    const cl = await c.closed;
    assert.equal(cl.code, 1000);
    const exit = c.frames.find((f) => f.type === "exit");
    assert.deepEqual(exit, { type: "exit", exit_code: 7 });
    st = await execd(sb, "GET", `/pty/${sid}`);
    assert.equal(st.json.running, false);

    // a command session, in pipe mode: stdout and stderr apart
    const pid = await createPty(sb, { command: "echo out; echo err >&2; read x; echo got-$x; exit 3" });
    const p = connect(sb, pid, "?pty=0");
    await p.opened;
    await p.waitFor((s) => s.frames.some((f) => f.type === "connected"), "connected");
    assert.equal(p.frames[0].mode, "pipe");
    p.input("abc\n");
    await p.closed;
    assert.equal(p.out, "out\ngot-abc\n");
    assert.equal(p.stderr, "err\n");
    assert.deepEqual(p.frames.at(-1), { type: "exit", exit_code: 3 });

    assert.equal((await execd(sb, "DELETE", `/pty/${sid}`)).status, 200);
    assert.equal((await execd(sb, "GET", `/pty/${sid}`)).status, 404);
    const gone = await execd(sb, "DELETE", `/pty/${sid}`);
    assert.equal(gone.status, 404);
    assert.equal(gone.json.code, "CONTEXT_NOT_FOUND");

    // pipe mode is binary-safe: every byte value through cat and back
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const bid = await createPty(sb, { command: "head -c 512 | cat" });
    const bin = connect(sb, bid, "?pty=0");
    await bin.opened;
    bin.ws.send(Buffer.concat([Buffer.from([0x00]), all]));
    bin.ws.send(Buffer.concat([Buffer.from([0x00]), all]));
    await bin.closed;
    assert.equal(Buffer.from(bin.out, "latin1").compare(Buffer.concat([all, all])), 0);

    // DELETE while connected: the client is told, the command is killed
    const did = await createPty(sb);
    const del = connect(sb, did);
    await del.opened;
    del.input("sleep 777\n");
    await sleep(300);
    assert.equal((await execd(sb, "DELETE", `/pty/${did}`)).status, 200);
    assert.equal((await del.closed).code, 1000);
    assert.deepEqual(del.frames.at(-1), {
      type: "error",
      error: "the pty session was deleted",
      code: "SESSION_GONE",
    });
    await sleep(300);
    const left = await execd(sb, "POST", "/command", { command: "pgrep -x sleep || echo none" });
    assert.match(left.text, /none/);

  });
});

test("pty: reconnect with since=, 409, takeover, grace expiry", async () => {
  await withSbxd({ args: ["--config", config()] }, async (server) => {
    const sb = await sandbox(server);
    const sid = await createPty(sb);
    const a = connect(sb, sid);
    await a.opened;
    a.input("echo first-$((1+1))\n");
    await a.waitOut(/first-2\r?\n/);
    await sleep(200);
    const off = (await execd(sb, "GET", `/pty/${sid}`)).json.output_offset;
    assert.ok(off > 0);

    // one client at a time
    const b = connect(sb, sid);
    await assert.rejects(b.opened, (e) => e.status === 409 && /ALREADY_CONNECTED/.test(e.body));

    // drop; output made meanwhile is replayed from the offset
    a.ws.terminate();
    await a.closed;
    await sleep(200);
    const c = connect(sb, sid, `?since=${off}`);
    await c.opened;
    await c.waitFor((s) => s.frames.some((f) => f.type === "connected"), "connected");
    assert.equal(c.replay, null, "nothing new since the offset: no replay frame");
    c.input("echo second-$((2+1))\n");
    await c.waitOut(/second-3\r?\n/);
    await sleep(200);

    // takeover: the holder is closed with 4001, the newcomer replays from the offset
    const d = connect(sb, sid, `?takeover=1&since=${off}`);
    await d.opened;
    const cc = await c.closed;
    assert.equal(cc.code, 4001);
    assert.equal(cc.reason, "TAKEN_OVER");
    await d.waitFor((s) => s.replay !== null, "replay");
    assert.equal(d.replayOffset, off);
    assert.match(d.replay, /second-3/);
    assert.doesNotMatch(d.replay, /first-2/);

    // since=0 after more than the buffer: the replay starts at the oldest byte kept
    d.input(`head -c ${BUFFER * 2} /dev/zero | tr '\\0' x; echo; echo big-done\n`);
    await d.waitOut(/big-done\r?\n/);
    await sleep(200);
    d.ws.close();
    await d.closed;
    const total = (await execd(sb, "GET", `/pty/${sid}`)).json.output_offset;
    const e = connect(sb, sid, "?since=0");
    await e.opened;
    await e.waitFor((s) => s.replay !== null, "replay");
    assert.equal(e.replayOffset, total - BUFFER);
    assert.equal(e.replay.length, BUFFER);
    assert.match(e.replay, /big-done/);
    e.input("sleep 600\n");
    await sleep(200);
    e.ws.terminate();
    await e.closed;

    // no client for the grace period: the session and its command are killed
    assert.equal((await execd(sb, "GET", `/pty/${sid}`)).json.running, true);
    await sleep(GRACE_S * 1000 + 1500);
    assert.equal((await execd(sb, "GET", `/pty/${sid}`)).status, 404);
    const ps = await execd(sb, "POST", "/command", { command: "pgrep -x sleep || echo none" });
    assert.match(ps.text, /none/);
  });
});

test("pty: bounds, credentials, handshake and malformed frames; sbxd stopping closes 1001", async () => {
  let held;
  await withSbxd({ args: ["--config", config()] }, async (server) => {
    const sb = await sandbox(server);
    const ids = [];
    for (let i = 0; i < MAX_SESSIONS; i++) ids.push(await createPty(sb));
    const over = await execd(sb, "POST", "/pty", {});
    assert.equal(over.status, 429, over.text);
    assert.equal(over.json.code, "PTY_SESSION_LIMIT");
    assert.match(over.json.message, /pty_max_sessions/);
    assert.equal((await execd(sb, "DELETE", `/pty/${ids.pop()}`)).status, 200);
    ids.push(await createPty(sb));

    // bad bodies change nothing
    for (const body of [{ cwd: 5 }, { command: [] }, { cols: 0 }, { rows: 99999 }, { env: { A: 1 } }]) {
      const r = await execd(sb, "POST", "/pty", body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.code, "INVALID_REQUEST_BODY");
    }

    // credentials: the access token or the API key; neither is 401 (REST and WebSocket)
    const none = await execd(sb, "POST", "/pty", {}, {});
    assert.equal(none.status, 401);
    const withKey = await execd(sb, "GET", `/pty/${ids[0]}`, undefined, { "OPEN-SANDBOX-API-KEY": server.apiKey });
    assert.equal(withKey.status, 200);
    const anon = connect(sb, ids[0], "", {});
    await assert.rejects(anon.opened, (e) => e.status === 401);
    // another sandbox's endpoint does not reach this sandbox's sessions, nor does its token
    const other = await sandbox(server);
    const cross = await execd(other, "GET", `/pty/${ids[0]}`);
    assert.equal(cross.status, 404);
    await assert.rejects(connect(other, ids[0]).opened, (e) => e.status === 404);
    assert.equal((await execd(other, "DELETE", `/pty/${ids[0]}`)).status, 404);
    assert.equal((await execd(sb, "GET", `/pty/${ids[0]}`, undefined, other.headers)).status, 401);
    assert.equal((await execd(sb, "GET", `/pty/${ids[0]}`)).status, 200);
    const missing = connect(sb, "00000000-0000-4000-8000-000000000000");
    await assert.rejects(missing.opened, (e) => e.status === 404 && /CONTEXT_NOT_FOUND/.test(e.body));

    // a plain GET of the WebSocket route, a bad key, a wrong version
    const plain = await execd(sb, "GET", `/pty/${ids[0]}/ws`);
    assert.equal(plain.status, 400);
    const raw = (headers) =>
      new Promise((resolve) => {
        const u = new URL(sb.base);
        const s = net.connect(Number(u.port), u.hostname, () => {
          const lines = [`GET ${u.pathname}/pty/${ids[0]}/ws HTTP/1.1`, `Host: ${u.host}`, "Upgrade: websocket", "Connection: Upgrade"];
          for (const [k, v] of Object.entries({ ...sb.headers, ...headers })) lines.push(`${k}: ${v}`);
          s.write(lines.join("\r\n") + "\r\n\r\n");
        });
        let got = "";
        s.on("data", (d) => {
          got += d.toString("latin1");
          if (got.includes("\r\n\r\n")) {
            s.destroy();
            resolve(got);
          }
        });
      });
    assert.match(await raw({ "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "short" }), /^HTTP\/1\.1 400/);
    assert.match(await raw({ "Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==" }), /^HTTP\/1\.1 426[^]*Sec-WebSocket-Version: 13/i);
    const ok = await raw({ "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==" });
    assert.match(ok, /^HTTP\/1\.1 101/);
    assert.match(ok, /Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/i); // RFC 6455's example
    await sleep(300);

    // malformed frames: an unmasked frame (1002), invalid UTF-8 text (1007), a too big
    // message (1009), a bad opcode (1002), a fragmented ping (1002)
    const frame = (bytes) => async () => {
      const c = connect(sb, ids[1], "?takeover=1");
      await c.opened;
      c.ws._socket.write(Buffer.from(bytes));
      return (await c.closed).code;
    };
    const masked = (op, payload, fin = true) => {
      const key = [1, 2, 3, 4];
      const p = Buffer.from(payload);
      return [(fin ? 0x80 : 0) | op, 0x80 | p.length, ...key, ...p.map((b, i) => b ^ key[i & 3])];
    };
    assert.equal(await frame([0x81, 0x02, 0x68, 0x69])(), 1002);
    assert.equal(await frame(masked(0x1, [0xc3, 0x28]))(), 1007);
    assert.equal(await frame(masked(0x3, [0x00]))(), 1002);
    assert.equal(await frame(masked(0x9, [0x00], false))(), 1002);
    assert.equal(await frame([0x82, 0xff, 0, 0, 0, 0, 0, 0x20, 0, 0, 1, 2, 3, 4])(), 1009);
    // a fragmented stdin message is reassembled
    const c = connect(sb, ids[1], "?takeover=1");
    await c.opened;
    const part1 = masked(0x2, [0x00, ...Buffer.from("echo frag")], false);
    const part2 = masked(0x0, [...Buffer.from("mented\n")]);
    c.ws._socket.write(Buffer.from([...part1, ...masked(0x9, [0x41]), ...part2]));
    await c.waitOut(/^fragmented\r?$/m);
    held = c; // still connected when sbxd stops
  });
  assert.equal((await held.closed).code, 1001);
});
