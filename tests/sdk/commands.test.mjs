// Commands through the official SDK: OpenSandbox's e2e tests 02, 02a, 02b, 02c and 04, plus
// timeouts, stderr and exit codes, in both the direct-endpoint and the server-proxy modes.
import { test } from "node:test";
import assert from "node:assert/strict";

import { MODES, assertRecentTimestampMs, sleep, withSandbox } from "./helpers.mjs";

function recorder() {
  const rec = { stdout: [], stderr: [], results: [], init: [], complete: [], errors: [] };
  rec.handlers = {
    onStdout: (m) => rec.stdout.push(m),
    onStderr: (m) => rec.stderr.push(m),
    onResult: (r) => rec.results.push(r),
    onInit: (i) => rec.init.push(i),
    onExecutionComplete: (c) => rec.complete.push(c),
    onError: (e) => rec.errors.push(e),
  };
  return rec;
}

for (const mode of MODES) {
  test(`02 command execution: success, cwd, background, failure (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      let rec = recorder();
      const ok = await sandbox.commands.run("echo 'Hello OpenSandbox E2E'", undefined, rec.handlers);
      assert.ok(ok.id);
      assert.equal(ok.error, undefined);
      assert.equal(ok.logs.stdout.length, 1);
      assert.equal(ok.logs.stdout[0]?.text, "Hello OpenSandbox E2E");
      assertRecentTimestampMs(ok.logs.stdout[0].timestamp);
      assert.equal(ok.exitCode, 0);
      assert.ok(ok.complete);
      assert.ok(ok.complete.executionTimeMs >= 0);
      assert.equal(rec.init.length, 1);
      assert.equal(rec.init[0].id, ok.id);
      assert.equal(rec.complete.length, 1);
      assert.equal(rec.errors.length, 0);

      const pwd = await sandbox.commands.run("pwd", { workingDirectory: "/tmp" });
      assert.equal(pwd.error, undefined);
      assert.equal(pwd.logs.stdout[0]?.text, "/tmp");
      assert.equal(pwd.exitCode, 0);
      assert.ok(pwd.complete);

      const start = Date.now();
      const bg = await sandbox.commands.run("sleep 30", { background: true });
      assert.ok(Date.now() - start < 10_000);
      assert.equal(bg.exitCode ?? null, null);
      assert.ok(bg.id);
      const st = await sandbox.commands.getCommandStatus(bg.id);
      assert.equal(st.running, true);

      rec = recorder();
      const fail = await sandbox.commands.run(
        "nonexistent-command-that-does-not-exist",
        undefined,
        rec.handlers,
      );
      assert.ok(fail.id);
      assert.ok(fail.error);
      assert.equal(fail.error.name, "CommandExecError");
      assert.equal(fail.error.value, "127");
      assert.ok(fail.logs.stderr.length > 0);
      assert.ok(fail.logs.stderr.some((m) => m.text.includes("nonexistent-command-that-does-not-exist")));
      assert.equal(fail.complete, undefined);
      assert.equal(fail.exitCode, Number(fail.error.value));
      assert.equal(rec.complete.length, 0);

      await assert.rejects(
        sandbox.commands.run("pwd", { workingDirectory: "/does/not/exist" }),
        (err) => {
          assert.equal(err.statusCode, 400);
          assert.equal(err.error.code, "INVALID_REQUEST_BODY");
          assert.match(err.error.message, /working directory does not exist: \/does\/not\/exist/);
          return true;
        },
      );
    });
  });
}

for (const mode of MODES) {
  test(`stderr, exit codes and blank lines (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const r = await sandbox.commands.run("echo out; echo err1 >&2; echo err2 >&2; exit 3");
      assert.deepEqual(r.logs.stdout.map((m) => m.text), ["out"]);
      assert.deepEqual(r.logs.stderr.map((m) => m.text), ["err1", "err2"]);
      assert.equal(r.error?.name, "CommandExecError");
      assert.equal(r.error?.value, "3");
      assert.deepEqual(r.error?.traceback, ["exit status 3"]);
      assert.equal(r.exitCode, 3);
      assert.equal(r.complete, undefined);

      // execd's line rules: one event per line, a blank line is "\n", the last partial line flushed
      const blank = await sandbox.commands.run("printf 'a\\n\\nb\\n\\n\\nc'");
      assert.deepEqual(blank.logs.stdout.map((m) => m.text), ["a", "\n", "b", "\n", "\n", "c"]);
      const crlf = await sandbox.commands.run("printf 'x\\r\\ny\\rz\\n'");
      assert.deepEqual(crlf.logs.stdout.map((m) => m.text), ["x", "y", "z"]);
      const utf8 = await sandbox.commands.run("printf 'caf\\xc3\\xa9 \\xff!\\n'");
      assert.equal(utf8.logs.stdout[0]?.text, "café \ufffd!");
    });
  });
}

for (const mode of MODES) {
  test(`02a command status + background logs with a byte cursor (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const exec = await sandbox.commands.run("sh -c 'echo log-line-1; echo log-line-2; sleep 2'", {
        background: true,
      });
      assert.ok(exec.id);
      const status = await sandbox.commands.getCommandStatus(exec.id);
      assert.equal(status.id, exec.id);
      assert.equal(typeof status.running, "boolean");
      assert.ok(status.startedAt instanceof Date);

      let logsText = "";
      let cursor;
      const cursors = [];
      for (let i = 0; i < 40; i++) {
        const logs = await sandbox.commands.getBackgroundCommandLogs(exec.id, cursor);
        logsText += logs.content;
        cursor = logs.cursor ?? cursor;
        cursors.push(cursor);
        if (logsText.includes("log-line-2")) break;
        await sleep(100);
      }
      assert.equal(logsText, "log-line-1\nlog-line-2\n");
      assert.equal(cursor, Buffer.byteLength(logsText));
      // reading again from the final cursor gives nothing new
      const again = await sandbox.commands.getBackgroundCommandLogs(exec.id, cursor);
      assert.equal(again.content, "");
      assert.equal(again.cursor, cursor);

      let done;
      for (let i = 0; i < 50; i++) {
        done = await sandbox.commands.getCommandStatus(exec.id);
        if (!done.running) break;
        await sleep(100);
      }
      assert.equal(done.running, false);
      assert.equal(done.exitCode, 0);
      assert.ok(done.finishedAt instanceof Date);
      await assert.rejects(sandbox.commands.getCommandStatus("no-such-command"), (err) => {
        assert.equal(err.statusCode, 404);
        assert.equal(err.error.message, "command not found: no-such-command");
        return true;
      });
    });
  });
}

for (const mode of MODES) {
  test(`02b command env injection (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy, env: { FROM_CREATE: "create-ok" } }, async (sandbox) => {
      const envKey = "OPEN_SANDBOX_E2E_CMD_ENV";
      const envValue = `env-ok-${Date.now()}`;
      const probe = `sh -c 'if [ -z "\${${envKey}:-}" ]; then echo "__EMPTY__"; else echo "\${${envKey}}"; fi'`;
      const baseline = await sandbox.commands.run(probe);
      assert.equal(baseline.error, undefined);
      assert.equal(baseline.logs.stdout.map((m) => m.text).join("\n").trim(), "__EMPTY__");
      const injected = await sandbox.commands.run(probe, {
        envs: { [envKey]: envValue, OPEN_SANDBOX_E2E_SECOND_ENV: "second-ok" },
      });
      assert.equal(injected.error, undefined);
      assert.equal(injected.logs.stdout.map((m) => m.text).join("\n").trim(), envValue);
      // the sandbox's env reaches every command, and a command's envs win
      const both = await sandbox.commands.run("echo $FROM_CREATE", {});
      assert.equal(both.logs.stdout[0]?.text, "create-ok");
      const over = await sandbox.commands.run("echo $FROM_CREATE", { envs: { FROM_CREATE: "over" } });
      assert.equal(over.logs.stdout[0]?.text, "over");
      await assert.rejects(sandbox.commands.run("true", { envs: { "1BAD": "x" } }), (err) => err.statusCode === 400);
    });
  });
}

for (const mode of MODES) {
  test(`02c bash sessions: working directory and env persistence (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const sid = await sandbox.commands.createSession({ workingDirectory: "/tmp" });
      assert.equal(typeof sid, "string");
      assert.ok(sid.length > 0);
      const text = (run) => run.logs.stdout.map((m) => m.text).join("").trim();

      let run = await sandbox.commands.runInSession(sid, "pwd");
      assert.equal(run.error, undefined);
      assert.equal(run.exitCode, 0);
      assert.equal(text(run), "/tmp");

      run = await sandbox.commands.runInSession(sid, "pwd", { workingDirectory: "/var" });
      assert.equal(run.exitCode, 0);
      assert.equal(text(run), "/var");

      run = await sandbox.commands.runInSession(sid, "pwd", { workingDirectory: "/tmp" });
      assert.equal(run.exitCode, 0);
      assert.equal(text(run), "/tmp");

      run = await sandbox.commands.runInSession(sid, "export E2E_SESSION_ENV=session-env-ok; cd /usr");
      assert.equal(run.error, undefined);

      run = await sandbox.commands.runInSession(sid, "echo $E2E_SESSION_ENV; pwd");
      assert.equal(run.error, undefined);
      assert.equal(run.exitCode, 0);
      assert.deepEqual(run.logs.stdout.map((m) => m.text), ["session-env-ok", "/usr"]);

      run = await sandbox.commands.runInSession(sid, "sh -c 'echo session-fail >&2; exit 7'");
      assert.equal(run.error?.name, "CommandExecError");
      assert.equal(run.error?.value, "7");
      assert.equal(run.exitCode, 7);
      assert.equal(run.complete, undefined);
      // stderr is merged into stdout in a session, as in execd
      assert.deepEqual(run.logs.stdout.map((m) => m.text), ["session-fail"]);

      // an `exit` in the session itself still keeps what was exported before it
      run = await sandbox.commands.runInSession(sid, "export LATE=late-ok; exit 5");
      assert.equal(run.exitCode, 5);
      run = await sandbox.commands.runInSession(sid, "echo $LATE");
      assert.equal(text(run), "late-ok");

      const sid2 = await sandbox.commands.createSession({ workingDirectory: "/var" });
      run = await sandbox.commands.runInSession(sid2, "pwd; echo ${E2E_SESSION_ENV:-unset}");
      assert.deepEqual(run.logs.stdout.map((m) => m.text), ["/var", "unset"]);

      await sandbox.commands.deleteSession(sid);
      await sandbox.commands.deleteSession(sid2);
      await assert.rejects(sandbox.commands.runInSession(sid, "pwd"), (err) => {
        assert.equal(err.statusCode, 404);
        assert.equal(err.error.code, "CONTEXT_NOT_FOUND");
        return true;
      });
      await assert.rejects(sandbox.commands.deleteSession(sid), (err) => err.statusCode === 404);
    });
  });
}

for (const mode of MODES) {
  test(`04 interrupt command (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const rec = recorder();
      let initResolve;
      const initPromise = new Promise((r) => (initResolve = r));
      rec.handlers.onInit = (i) => {
        rec.init.push(i);
        initResolve(i);
      };
      const started = Date.now();
      const task = sandbox.commands.run("sleep 30", undefined, rec.handlers);
      const init = await initPromise;
      assert.ok(init.id);
      assertRecentTimestampMs(init.timestamp);
      await sandbox.commands.interrupt(init.id);
      const exec = await task;
      assert.ok(Date.now() - started < 10_000);
      assert.equal(exec.id, init.id);
      assert.equal(rec.complete.length, 0);
      assert.equal(rec.errors.length, 1);
      assert.equal(exec.error.value, "-1");
      assert.deepEqual(exec.error.traceback, ["signal: terminated"]);
      const followUp = await sandbox.commands.run("echo interrupt-ok");
      assert.equal(followUp.error, undefined);
      assert.equal(followUp.logs.stdout[0]?.text, "interrupt-ok");
      // a command that ignores SIGTERM is killed after the grace period
      const stubborn = sandbox.commands.run("trap '' TERM; sleep 30 & wait", undefined, {
        onInit: (i) => setTimeout(() => sandbox.commands.interrupt(i.id).catch(() => {}), 100),
      });
      const t0 = Date.now();
      const s = await stubborn;
      assert.ok(Date.now() - t0 < 10_000);
      assert.equal(s.error?.value, "-1");
      assert.deepEqual(s.error?.traceback, ["signal: killed"]);
      await assert.rejects(sandbox.commands.interrupt("not-running"), (err) => {
        assert.equal(err.statusCode, 500);
        assert.equal(err.error.message, "error interruptting code context. no such session");
        return true;
      });
    });
  });
}

for (const mode of MODES) {
  test(`timeouts kill the command and report -1 (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const t0 = Date.now();
      const r = await sandbox.commands.run("echo started; sleep 20", { timeoutSeconds: 0.5 });
      assert.ok(Date.now() - t0 < 5_000);
      assert.deepEqual(r.logs.stdout.map((m) => m.text), ["started"]);
      assert.equal(r.error?.name, "CommandExecError");
      assert.equal(r.error?.value, "-1");
      // -1 as Go's execd reports a kill; the traceback adds that it was the deadline
      assert.deepEqual(r.error?.traceback, ["signal: killed", "context deadline exceeded"]);
      assert.equal(r.exitCode, -1);
      const st = await sandbox.commands.getCommandStatus(r.id);
      assert.equal(st.running, false);
      assert.equal(st.exitCode, -1);
      assert.equal(st.error, "signal: killed");
      // a session run times out too
      const sid = await sandbox.commands.createSession();
      const s = await sandbox.commands.runInSession(sid, "sleep 20", { timeoutSeconds: 0.5 });
      assert.equal(s.error?.value, "-1");
    });
  });
}
