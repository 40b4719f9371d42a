// Bad JSON-RPC over both transports, written by hand: each is answered per the spec (the right
// error code, id null when none could be read) and the session goes on unharmed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import readline from "node:readline";

import { API_KEY, SBX, cleanHome, startSbxd, tempHome } from "./helpers.mjs";

const INIT = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
};

// [what is sent, the error code expected, the id expected in the answer]
const BAD = [
  ["{not json", -32700, null],
  ['{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":', -32700, null],
  ["[]", -32600, null],
  ['[{"jsonrpc":"2.0","id":8,"method":"ping"}]', -32600, null],
  ['"just a string"', -32600, null],
  ['{"jsonrpc":"1.0","id":9,"method":"ping"}', -32600, 9],
  ['{"jsonrpc":"2.0","id":10}', -32600, 10],
  ['{"jsonrpc":"2.0","id":11,"method":42}', -32600, 11],
  ['{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600, null],
  ['{"jsonrpc":"2.0","id":12,"method":"no/such/method"}', -32601, 12],
  ['{"jsonrpc":"2.0","id":13,"method":"tools/call","params":[1,2]}', -32602, 13],
  ['{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{}}', -32602, 14],
  ['{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"execute_command","arguments":"x"}}', -32602, 15],
  ['{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"nope"}}', -32602, 16],
  ['{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{}}', -32602, 17],
  ['{"jsonrpc":"2.0","id":18,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}', -32600, 18],
];

// A raw stdio session: send(line) and next() -> the next message.
function rawStdio(home, args = []) {
  const child = spawn(SBX, ["--home", home, "mcp", ...args], { stdio: ["pipe", "pipe", "pipe"] });
  const rl = readline.createInterface({ input: child.stdout });
  const queue = [];
  const waiters = [];
  rl.on("line", (l) => {
    const m = JSON.parse(l); // stdout carries only JSON-RPC messages
    if (waiters.length) waiters.shift()(m);
    else queue.push(m);
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  return {
    send: (s) => child.stdin.write(s + "\n"),
    next: () =>
      queue.length
        ? Promise.resolve(queue.shift())
        : new Promise((resolve, reject) => {
            const t = setTimeout(() => reject(new Error(`no answer; stderr:\n${stderr}`)), 30000);
            waiters.push((m) => {
              clearTimeout(t);
              resolve(m);
            });
          }),
    async close(stdoutToo = false) {
      if (stdoutToo) child.stdout.destroy(); // the client is gone: nobody reads the answers
      child.stdin.end();
      const r = await exited;
      return { ...r, stderr };
    },
    async kill(sig) {
      child.kill(sig);
      const r = await exited;
      child.stdin.end();
      return { ...r, stderr };
    },
  };
}

test("stdio: bad JSON-RPC is answered per spec, without harm", async () => {
  const home = tempHome();
  try {
    const s = rawStdio(home, ["-t", "raw"]);
    // before initialize: only initialize and ping
    s.send('{"jsonrpc":"2.0","id":"early","method":"tools/list"}');
    let m = await s.next();
    assert.equal(m.id, "early");
    assert.equal(m.error.code, -32600);
    assert.match(m.error.message, /not initialized/);
    s.send(JSON.stringify(INIT));
    m = await s.next();
    assert.equal(m.result.protocolVersion, "2025-11-25");
    s.send('{"jsonrpc":"2.0","method":"notifications/initialized"}');
    for (const [line, code, id] of BAD) {
      s.send(line);
      m = await s.next();
      assert.equal(m.jsonrpc, "2.0");
      assert.equal(m.error?.code, code, `${line} -> ${JSON.stringify(m)}`);
      assert.equal(m.id, id, line);
      assert.ok(m.error.message.length > 5);
    }
    // notifications and responses get no answer; unknown notifications are ignored
    s.send('{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}');
    s.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"none"}}');
    s.send('{"jsonrpc":"2.0","id":99,"result":{}}');
    // an unknown protocol revision: we answer with ours (checked in a second session below)
    s.send('{"jsonrpc":"2.0","id":"p","method":"ping"}');
    m = await s.next();
    assert.deepEqual(m, { jsonrpc: "2.0", id: "p", result: {} });
    s.send('{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo ok"}}}');
    m = await s.next();
    assert.equal(m.id, "x");
    assert.equal(m.result.content[0].text, "ok\n");
    const { code, signal, stderr } = await s.close();
    assert.equal(signal, null, stderr);
    assert.equal(code, 0, stderr);

    const s2 = rawStdio(home, ["-t", "raw"]);
    s2.send(JSON.stringify({ ...INIT, params: { ...INIT.params, protocolVersion: "1999-01-01" } }));
    m = await s2.next();
    assert.equal(m.result.protocolVersion, "2025-11-25");
    s2.send(JSON.stringify({ ...INIT, id: 2, params: { ...INIT.params, protocolVersion: "2025-06-18" } }));
    m = await s2.next();
    assert.equal(m.error.code, -32600); // initialized once only
    await s2.close();
  } finally {
    cleanHome(home);
  }
});

function psState(home, thread) {
  const r = spawnSync(SBX, ["--home", home, "ps", "--json"], { encoding: "utf8" });
  const j = JSON.parse(r.stdout);
  const list = Array.isArray(j) ? j : j.sandboxes;
  return list.find((x) => x.thread === thread)?.state;
}

for (const how of ["SIGTERM", "end of input with stdout closed"]) {
  test(`stdio: ${how} kills what runs and parks the sandbox warm`, async () => {
    const home = tempHome();
    try {
      const s = rawStdio(home, ["-t", "park"]);
      s.send(JSON.stringify(INIT));
      await s.next();
      s.send('{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo $$ > /mnt/user-data/workspace/pid; sleep 60"}}}');
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(psState(home, "park"), "active"); // positive control
      const t0 = Date.now();
      const { code, signal, stderr } = how === "SIGTERM" ? await s.kill("SIGTERM") : await s.close(true);
      assert.equal(signal, null, stderr);
      assert.equal(code, 0, stderr);
      assert.ok(Date.now() - t0 < 15000);
      assert.equal(psState(home, "park"), "warm");
      // the command is gone: a new session of the scope finds its shell dead
      const s2 = rawStdio(home, ["-t", "park"]);
      s2.send(JSON.stringify(INIT));
      await s2.next();
      s2.send('{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"kill -0 $(cat /mnt/user-data/workspace/pid) 2>/dev/null && echo alive || echo dead"}}}');
      const m = await s2.next();
      assert.equal(m.result.content[0].text, "dead\n");
      await s2.close();
    } finally {
      cleanHome(home);
    }
  });
}

test("stdio: end of input answers what was read before it, then parks the sandbox", async () => {
  const home = tempHome();
  try {
    const s = rawStdio(home, ["-t", "park"]);
    s.send(JSON.stringify(INIT));
    await s.next();
    s.send('{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"sleep 2; echo done"}}}');
    const closed = s.close();
    const m = await s.next();
    assert.equal(m.id, "a");
    assert.equal(m.result.content[0].text, "done\n");
    const { code, signal, stderr } = await closed;
    assert.equal(signal, null, stderr);
    assert.equal(code, 0, stderr);
    assert.equal(psState(home, "park"), "warm");
  } finally {
    cleanHome(home);
  }
});

test("stdio: a bad scope is a usage error", async () => {
  const home = tempHome();
  try {
    const child = spawn(SBX, ["--home", home, "mcp", "-t", "no spaces!"], { stdio: ["ignore", "pipe", "pipe"] });
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    const code = await new Promise((r) => child.on("exit", r));
    assert.equal(code, 2);
    assert.match(err, /thread/);
  } finally {
    cleanHome(home);
  }
});

test("http: bad requests are answered per spec, without harm", async () => {
  const server = await startSbxd();
  try {
    const post = (body, headers = {}) =>
      fetch(server.url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          Authorization: `Bearer ${API_KEY}`,
          ...headers,
        },
        body,
      });
    // the API key is required (bearer or OpenSandbox's header)
    let r = await post(JSON.stringify(INIT), { Authorization: "Bearer wrong" });
    assert.equal(r.status, 401);
    assert.equal((await r.json()).error.code, -32600);
    r = await post(JSON.stringify(INIT), { Authorization: "", "OPEN-SANDBOX-API-KEY": API_KEY });
    assert.equal(r.status, 200);
    // a foreign Origin is refused (DNS rebinding)
    r = await post(JSON.stringify(INIT), { Origin: "http://evil.example" });
    assert.equal(r.status, 403);
    // open a session
    r = await post(JSON.stringify(INIT));
    assert.equal(r.status, 200);
    const sid = r.headers.get("mcp-session-id");
    assert.match(sid, /^[0-9a-f]{32}$/);
    assert.equal((await r.json()).result.protocolVersion, "2025-11-25");
    const h = { "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25" };
    r = await post('{"jsonrpc":"2.0","method":"notifications/initialized"}', h);
    assert.equal(r.status, 202);
    // a tool call or resource request answers over an event stream, the rest with JSON
    const answer = async (res) => {
      const t = await res.text();
      if (!/text\/event-stream/.test(res.headers.get("content-type"))) return JSON.parse(t);
      const msgs = t.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)));
      return msgs.at(-1);
    };
    for (const [line, code, id] of BAD) {
      r = await post(line, h);
      const m = await answer(r);
      assert.equal(m.error?.code, code, `${line} -> ${JSON.stringify(m)}`);
      assert.equal(m.id, id, line);
      // what the parser refuses is an HTTP 400; what a session refuses is a JSON-RPC error
      assert.equal(r.status, id === null || id < 12 || code === -32602 && id === 13 ? 400 : 200, line);
    }
    // no session, an unknown one, a bad protocol version
    r = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}');
    assert.equal(r.status, 400);
    r = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { "Mcp-Session-Id": "f".repeat(32) });
    assert.equal(r.status, 404);
    r = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { ...h, "MCP-Protocol-Version": "1999-01-01" });
    assert.equal(r.status, 400);
    // bad scope headers
    r = await post(JSON.stringify(INIT), { "Sbx-Thread": "bad thread!" });
    assert.equal(r.status, 400);
    // GET: no server stream
    r = await fetch(server.url, { headers: { Authorization: `Bearer ${API_KEY}`, Accept: "text/event-stream" } });
    assert.equal(r.status, 405);
    // the session still works: a tool call answers with JSON, or over an event stream when it
    // asks for progress
    r = await post('{"jsonrpc":"2.0","id":"j","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo ok"}}}', h);
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /application\/json/);
    assert.equal((await r.json()).result.content[0].text, "ok\n");
    r = await post('{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"execute_command","arguments":{"command":"sleep 1.5; echo ok"},"_meta":{"progressToken":"pt"}}}', h);
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /text\/event-stream/);
    const body = await r.text();
    const data = body.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)));
    assert.equal(data[0].method, "notifications/progress");
    assert.equal(data[0].params.progressToken, "pt");
    assert.equal(data.at(-1).id, "t");
    assert.equal(data.at(-1).result.content[0].text, "ok\n");
    // DELETE ends it
    r = await fetch(server.url, { method: "DELETE", headers: { ...h, Authorization: `Bearer ${API_KEY}` } });
    assert.equal(r.status, 204);
    r = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}', h);
    assert.equal(r.status, 404);
  } finally {
    await server.stop();
  }
});
