// The MCP SDK as the client of both transports: initialize, tools/list, every tool on success
// and on error (the contract's texts), resources, progress, cancellation, scopes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Ajv from "ajv";

import { SBX, call, sleep, tempHome, cleanHome, text, withServer } from "./helpers.mjs";

const MKIMAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../images/mkimage.py");

// A busybox image built offline (tests/images/mkimage.py) and imported into home's store.
function importImage(home, name) {
  const tar = path.join(home, "image.tar");
  let r = spawnSync("python3", [MKIMAGE, "--name", name, tar], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  r = spawnSync(SBX, ["--home", home, "image", "import", tar], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), name);
}
// The host image has the host's /usr (with /usr/bin/env); the busybox image has an empty one.
const WHICH_ROOT = "test -e /usr/bin/env && echo host || echo image";

const W = "/mnt/user-data/workspace";
const TOOLS = [
  "download_file",
  "execute_command",
  "glob",
  "grep",
  "list_dir",
  "list_images",
  "read_file",
  "release_sandbox",
  "reset_sandbox",
  "update_file",
  "write_file",
];

for (const kind of ["stdio", "http"]) {
  test(`${kind}: initialize and tools/list (schemas valid)`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "init"], headers: { "Sbx-Thread": "init" } });
      assert.equal(c.getServerVersion().name, "sbx");
      const caps = c.getServerCapabilities();
      assert.ok(caps.tools && caps.resources);
      assert.match(c.getInstructions(), /\/mnt\/user-data\/outputs/);
      const { tools } = await c.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
      const ajv = new Ajv({ strict: false });
      for (const t of tools) {
        assert.ok(t.description.length > 40, `${t.name} has a description`);
        assert.equal(t.inputSchema.type, "object");
        ajv.compile(t.inputSchema);
        if (t.outputSchema) ajv.compile(t.outputSchema);
        for (const [k, v] of Object.entries(t.inputSchema.properties || {}))
          assert.ok(v.description || v.type === "object", `${t.name}.${k} is described`);
      }
      const exec = tools.find((t) => t.name === "execute_command");
      assert.deepEqual(exec.inputSchema.required, ["command"]);
      assert.equal(exec.annotations.readOnlyHint, false);
      assert.equal(tools.find((t) => t.name === "read_file").annotations.readOnlyHint, true);
    });
  });

  test(`${kind}: every tool, on success and on error`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "tools"], headers: { "Sbx-Thread": "tools" } });
      // execute_command
      let r = await call(c, "execute_command", { command: "echo hi" });
      assert.equal(text(r), "hi\n");
      assert.equal(r.isError, false);
      assert.equal(r.structuredContent.exit_code, 0);
      r = await call(c, "execute_command", { command: "echo out; echo err >&2; exit 3" });
      assert.equal(text(r), "out\n\nStd Error:\nerr\n\nExit Code: 3");
      assert.equal(r.isError, true);
      assert.equal(r.structuredContent.exit_code, 3);
      r = await call(c, "execute_command", { command: "true" });
      assert.equal(text(r), "(no output)");
      r = await call(c, "execute_command", { command: "echo $FOO", env: { FOO: "bar" } });
      assert.equal(text(r), "bar\n");
      r = await call(c, "execute_command", { command: "true", env: { "BAD KEY": "x" } });
      assert.equal(r.isError, true);
      assert.match(text(r), /^Error: extra_env key 'BAD KEY' is not a valid POSIX environment variable name/);
      r = await call(c, "execute_command", { command: "sleep 10", timeout: 1 });
      assert.match(text(r), /Error: command timed out\nExit Code: 124$/);
      assert.equal(r.structuredContent.timed_out, true);
      r = await call(c, "execute_command", { command: "true", timeout: -1 });
      assert.equal(r.isError, true);
      assert.match(text(r), /timeout/);
      r = await call(c, "execute_command", {});
      assert.equal(r.isError, true);
      assert.match(text(r), /'command' is required/);
      r = await call(c, "execute_command", { command: "true", cmd: "x" });
      assert.match(text(r), /unknown argument 'cmd'/);
      r = await call(c, "execute_command", { command: 42 });
      assert.match(text(r), /'command' must be a string/);

      // write_file, read_file
      r = await call(c, "write_file", { path: `${W}/a/b.txt`, content: "one\ntwo\nthree\n" });
      assert.equal(text(r), "OK");
      r = await call(c, "write_file", { path: `${W}/a/b.txt`, content: "four\n", append: true });
      assert.equal(text(r), "OK");
      r = await call(c, "read_file", { path: `${W}/a/b.txt` });
      assert.equal(text(r), "one\ntwo\nthree\nfour\n");
      r = await call(c, "read_file", { path: `${W}/a/b.txt`, start_line: 2, end_line: 3 });
      assert.equal(text(r), "two\nthree");
      r = await call(c, "read_file", { path: `${W}/a/b.txt`, start_line: 1e300 });
      assert.equal(text(r), "Error: invalid arguments: 'start_line' must be an integer");
      r = await call(c, "read_file", { path: `${W}/a/b.txt`, start_line: 50 });
      assert.equal(text(r), "(start_line exceeds file length)");
      r = await call(c, "read_file", { path: `${W}/missing.txt` });
      assert.equal(r.isError, true);
      assert.equal(text(r), `Error: File not found: ${W}/missing.txt: No such file or directory`);
      r = await call(c, "write_file", { path: "relative.txt", content: "x" });
      assert.equal(text(r), "Error: path must be absolute: 'relative.txt'");
      r = await call(c, "read_file", { path: `${W}/../../etc/passwd` });
      assert.match(text(r), /^Error: Access denied: path traversal detected/);

      // update_file, download_file (an embedded resource)
      const bytes = Buffer.from([0, 1, 2, 255, 254, 10]);
      r = await call(c, "update_file", { path: "/mnt/user-data/outputs/bin.dat", content_base64: bytes.toString("base64") });
      assert.equal(text(r), "OK");
      r = await call(c, "download_file", { path: "/mnt/user-data/outputs/bin.dat" });
      const res = r.content.find((x) => x.type === "resource").resource;
      assert.equal(res.uri, "file:///mnt/user-data/outputs/bin.dat");
      assert.deepEqual(Buffer.from(res.blob, "base64"), bytes);
      r = await call(c, "download_file", { path: `${W}/a/b.txt` });
      assert.equal(r.content.find((x) => x.type === "resource").resource.text, "one\ntwo\nthree\nfour\n");
      r = await call(c, "update_file", { path: `${W}/x`, content_base64: "not base64!" });
      assert.equal(r.isError, true);
      assert.match(text(r), /not valid base64/);
      r = await call(c, "download_file", { path: "/etc/passwd" });
      assert.equal(text(r), "Error: Access denied: path must be under '/mnt/user-data': '/etc/passwd'");
      r = await call(c, "execute_command", { command: `head -c 11000000 /dev/zero > ${W}/big` });
      r = await call(c, "download_file", { path: `${W}/big` });
      assert.equal(r.isError, true);
      assert.match(text(r), /exceeds the MCP download limit/);

      // list_dir, glob, grep
      r = await call(c, "list_dir", { path: `${W}/a` });
      assert.equal(text(r), `${W}/a/b.txt`);
      r = await call(c, "execute_command", { command: `mkdir -p ${W}/empty` });
      r = await call(c, "list_dir", { path: `${W}/empty` });
      assert.equal(text(r), "(empty)");
      r = await call(c, "list_dir", { path: `${W}/nope` });
      assert.equal(r.isError, true);
      assert.match(text(r), /^Error: /);
      r = await call(c, "glob", { path: W, pattern: "*.txt" });
      assert.equal(text(r), `Found 1 paths under ${W}\n1. ${W}/a/b.txt`);
      assert.deepEqual(r.structuredContent, { matches: [`${W}/a/b.txt`], truncated: false });
      r = await call(c, "glob", { path: W, pattern: "*.none" });
      assert.equal(text(r), `No files matched under ${W}`);
      r = await call(c, "grep", { path: W, pattern: "thr+ee" });
      assert.equal(text(r), `Found 1 matches under ${W}\n${W}/a/b.txt:3: three`);
      assert.equal(r.structuredContent.matches[0].line_number, 3);
      r = await call(c, "grep", { path: W, pattern: "zzz" });
      assert.equal(text(r), `No matches found under ${W}`);
      r = await call(c, "grep", { path: W, pattern: "(" });
      assert.equal(r.isError, true);
      assert.match(text(r), /^Error: /);

      // unknown tool: a JSON-RPC error (invalid params)
      await assert.rejects(call(c, "no_such_tool"), (e) => e.code === -32602 && /Unknown tool/.test(e.message));
    });
  });

  test(`${kind}: resources are the files of /mnt/user-data/outputs`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "res"], headers: { "Sbx-Thread": "res" } });
      assert.deepEqual((await c.listResources()).resources, []);
      await call(c, "write_file", { path: "/mnt/user-data/outputs/report one.md", content: "# hi\n" });
      await call(c, "write_file", { path: "/mnt/user-data/outputs/sub/data.json", content: "{}" });
      const { resources } = await c.listResources();
      const uris = resources.map((r) => r.uri).sort();
      assert.deepEqual(uris, [
        "file:///mnt/user-data/outputs/report%20one.md",
        "file:///mnt/user-data/outputs/sub/data.json",
      ]);
      const md = resources.find((r) => r.name === "report one.md");
      assert.equal(md.mimeType, "text/markdown");
      assert.equal(md.size, 5);
      const { contents } = await c.readResource({ uri: md.uri });
      assert.equal(contents[0].text, "# hi\n");
      await assert.rejects(c.readResource({ uri: "file:///etc/passwd" }), (e) => e.code === -32002);
      await assert.rejects(c.readResource({ uri: "file:///mnt/user-data/outputs/gone" }), (e) => e.code === -32002);
    });
  });

  test(`${kind}: progress notifications while a command runs`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "prog"], headers: { "Sbx-Thread": "prog" } });
      const seen = [];
      const r = await call(c, "execute_command", { command: "sleep 2.6; echo done" }, { onprogress: (p) => seen.push(p) });
      assert.equal(text(r), "done\n");
      assert.ok(seen.length >= 2, `progress: ${JSON.stringify(seen)}`);
      assert.deepEqual(seen.slice(0, 2).map((p) => p.progress), [1, 2]);
      assert.match(seen[0].message, /running for 1 s/);
    });
  });

  test(`${kind}: cancelling a call kills its command`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "cancel"], headers: { "Sbx-Thread": "cancel" } });
      const ac = new AbortController();
      const t0 = Date.now();
      const p = call(c, "execute_command", { command: `echo $$ > ${W}/pid; sleep 60; touch ${W}/finished` }, { signal: ac.signal });
      await sleep(1500);
      ac.abort("test");
      await assert.rejects(p);
      assert.ok(Date.now() - t0 < 10000);
      // positive control first: the pid file is there, so the check below can see a live shell
      let r = await call(c, "read_file", { path: `${W}/pid` });
      const pid = text(r).trim();
      assert.match(pid, /^\d+$/);
      let state = "";
      for (let i = 0; i < 50 && state !== "dead"; i++) {
        r = await call(c, "execute_command", { command: `kill -0 ${pid} 2>/dev/null && echo alive || echo dead` });
        state = text(r).trim();
        if (state !== "dead") await sleep(100);
      }
      assert.equal(state, "dead");
      r = await call(c, "execute_command", { command: "pgrep -x sleep || echo none" });
      assert.equal(text(r), "none\n");
      // the session goes on
      r = await call(c, "execute_command", { command: "echo still here" });
      assert.equal(text(r), "still here\n");
    });
  });

  test(`${kind}: two sessions in two scopes cannot see each other`, async () => {
    await withServer(kind, async (open) => {
      const a = await open({ args: ["-t", "alpha"], headers: { "Sbx-Thread": "alpha" } });
      const b = await open({ args: ["-t", "beta", "-u", "other"], headers: { "Sbx-Thread": "beta", "Sbx-User": "other" } });
      await call(a, "write_file", { path: `${W}/secret`, content: "a's" });
      let r = await call(a, "read_file", { path: `${W}/secret` });
      assert.equal(text(r), "a's"); // positive control
      r = await call(b, "read_file", { path: `${W}/secret` });
      assert.match(text(r), /^Error: File not found: /);
      r = await call(a, "execute_command", { command: "hostname; cat /proc/1/stat | cut -d' ' -f1" });
      const r2 = await call(b, "execute_command", { command: "hostname; cat /proc/1/stat | cut -d' ' -f1" });
      assert.notEqual(text(r).split("\n")[0], text(r2).split("\n")[0]);
      // without a scope, each session gets a sandbox of its own
      const c1 = await open();
      const c2 = await open();
      await call(c1, "write_file", { path: `${W}/mine`, content: "1" });
      r = await call(c1, "read_file", { path: `${W}/mine` });
      assert.equal(text(r), "1");
      r = await call(c2, "read_file", { path: `${W}/mine` });
      assert.equal(r.isError, true);
      // a second session of scope alpha sees alpha's files
      const a2 = await open({ args: ["-t", "alpha"], headers: { "Sbx-Thread": "alpha" } });
      r = await call(a2, "read_file", { path: `${W}/secret` });
      assert.equal(text(r), "a's");
    });
  });

  test(`${kind}: release_sandbox parks it warm, reset_sandbox starts afresh`, async () => {
    await withServer(kind, async (open) => {
      const c = await open({ args: ["-t", "life"], headers: { "Sbx-Thread": "life" } });
      await call(c, "write_file", { path: `${W}/keep`, content: "kept" });
      await call(c, "write_file", { path: "/tmp/scratch", content: "tmp" });
      await call(c, "execute_command", { command: "sleep 1000 >/dev/null 2>&1 &" });
      let r = await call(c, "release_sandbox");
      assert.match(text(r), /^OK/);
      // warm: files and background processes survive (the positive control for the reset)
      r = await call(c, "read_file", { path: "/tmp/scratch" });
      assert.equal(text(r), "tmp");
      r = await call(c, "execute_command", { command: "pgrep -x sleep >/dev/null && echo running" });
      assert.equal(text(r), "running\n");
      r = await call(c, "reset_sandbox");
      assert.match(text(r), /^OK/);
      r = await call(c, "read_file", { path: "/tmp/scratch" });
      assert.match(text(r), /^Error: File not found: /);
      r = await call(c, "execute_command", { command: "pgrep -x sleep || echo none" });
      assert.equal(text(r), "none\n");
      // the thread's data outlives its sandbox
      r = await call(c, "read_file", { path: `${W}/keep` });
      assert.equal(text(r), "kept");
    });
  });

  test(`${kind}: list_images shows the store; the session's sandbox is made from its image`, async () => {
    await withServer(kind, async (open, { server, home }) => {
      home = home || server.home;
      const c = await open({ args: ["-t", "noimg"], headers: { "Sbx-Thread": "noimg" } });
      let r = await call(c, "list_images");
      assert.equal(r.isError, false);
      assert.deepEqual(r.structuredContent, { images: [], sandbox_image: "host" });
      assert.match(text(r), /^New sandboxes of this session are made from: host\n.*\nNo images in the store\.$/s);
      importImage(home, "bb:1");
      r = await call(c, "list_images");
      assert.equal(r.isError, false);
      const [img, ...more] = r.structuredContent.images;
      assert.deepEqual(more, []);
      assert.equal(img.name, "bb:1");
      assert.match(img.digest, /^sha256:[0-9a-f]{64}$/);
      assert.ok(img.size > 100000, `size ${img.size}`);
      assert.equal(img.created, "2024-01-02T03:04:05Z");
      assert.ok(Math.abs(img.imported - Date.now() / 1000) < 600);
      assert.equal(img.in_use, 0);
      assert.match(text(r), new RegExp(`^1 image in the store:\n1\\. bb:1  ${img.digest.slice(0, 19)}  .* MB  created 2024-01-02T03:04:05Z  in use by 0$`, "m"));
      // what `sbx images --json` shows, from the same store
      const cli = spawnSync(SBX, ["--home", home, "images", "--json"], { encoding: "utf8" });
      assert.equal(cli.status, 0, cli.stderr);
      assert.deepEqual(JSON.parse(cli.stdout).images, r.structuredContent.images);
      // the positive control: without --image the session's sandbox is the configured one (host)
      r = await call(c, "execute_command", { command: WHICH_ROOT });
      assert.equal(text(r), "host\n");
      if (kind === "stdio") {
        const b = await open({ args: ["-t", "withimg", "--image", "bb:1"] });
        r = await call(b, "list_images");
        assert.equal(r.structuredContent.sandbox_image, "bb:1");
        assert.match(text(r), /^New sandboxes of this session are made from: bb:1\n/);
        r = await call(b, "execute_command", { command: WHICH_ROOT });
        assert.equal(text(r), "image\n");
        r = await call(b, "list_images");
        assert.equal(r.structuredContent.images[0].in_use, 1);
        // a fresh sandbox after reset_sandbox is made from the image again
        await call(b, "reset_sandbox");
        r = await call(b, "execute_command", { command: WHICH_ROOT });
        assert.equal(text(r), "image\n");
      }
      // a damaged store is a tool error naming the file
      writeFileSync(path.join(home, "images", "index.json"), "{bad");
      r = await call(c, "list_images");
      assert.equal(r.isError, true);
      assert.match(text(r), /^Error: `.*\/images\/index\.json` is damaged/);
    });
  });
}

test("stdio: sbx mcp --image refuses an image that is not in the store", async () => {
  const home = tempHome();
  try {
    const r = spawnSync(SBX, ["--home", home, "mcp", "--image", "nope:1"], { input: "", encoding: "utf8" });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--image: image `nope:1` is not in the store/);
    assert.equal(r.stdout, "");
    // the positive control: an image that is there is accepted (the server starts, stdin ends)
    importImage(home, "bb:1");
    const ok = spawnSync(SBX, ["--home", home, "mcp", "--image", "bb:1"], { input: "", encoding: "utf8" });
    assert.equal(ok.status, 0, ok.stderr);
  } finally {
    cleanHome(home);
  }
});
