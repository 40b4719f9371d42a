// Lifecycle through the official SDK: the assertions of OpenSandbox's JS e2e tests 01, 01b,
// 01g, 05 and 06 (test_sandbox_e2e.test.ts, test_sandbox_manager_e2e.test.ts), in both the
// direct-endpoint and the server-proxy modes.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  ConnectionConfig,
  DEFAULT_EXECD_PORT,
  DEFAULT_EGRESS_PORT,
  Sandbox,
  SandboxApiException,
  SandboxManager,
} from "@alibaba-group/opensandbox";

import {
  IMAGE,
  MODES,
  assertEndpointHasPort,
  assertRecentTimestampMs,
  sleep,
  withSandbox,
  withSbxd,
} from "./helpers.mjs";

for (const mode of MODES) {
  test(`01 lifecycle, health, endpoint, metrics, renew, connect (${mode.name})`, async () => {
    await withSandbox(
      {
        useServerProxy: mode.useServerProxy,
        metadata: { tag: "e2e-test" },
        env: { E2E_TEST: "true", PYTHON_VERSION: "3.12" },
      },
      async (sandbox, server) => {
        assert.equal(typeof sandbox.id, "string");
        assert.match(sandbox.id, /^[0-9a-f]{16}$/);
        assert.equal(await sandbox.isHealthy(), true);

        const info = await sandbox.getInfo();
        assert.equal(info.id, sandbox.id);
        assert.equal(info.status.state, "Running");
        assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"]);
        assert.equal(info.metadata?.tag, "e2e-test");
        assert.ok(info.createdAt instanceof Date);
        assert.ok(info.expiresAt instanceof Date);
        assert.ok(info.expiresAt.getTime() > Date.now() + 19 * 60 * 1000);

        const ep = await sandbox.getEndpoint(DEFAULT_EXECD_PORT);
        assert.equal(typeof ep.endpoint, "string");
        assertEndpointHasPort(ep.endpoint, DEFAULT_EXECD_PORT);
        if (mode.useServerProxy)
          assert.ok(ep.endpoint.endsWith(`/sandboxes/${sandbox.id}/proxy/${DEFAULT_EXECD_PORT}`));
        assert.equal(typeof ep.headers?.["X-EXECD-ACCESS-TOKEN"], "string");
        const egress = await sandbox.getEndpoint(DEFAULT_EGRESS_PORT);
        assertEndpointHasPort(egress.endpoint, DEFAULT_EGRESS_PORT);

        const env = await sandbox.commands.run("echo $E2E_TEST-$PYTHON_VERSION");
        assert.equal(env.logs.stdout[0]?.text, "true-3.12");

        const metrics = await sandbox.getMetrics();
        assert.ok(metrics.cpuCount > 0);
        assert.ok(metrics.cpuUsedPercentage >= 0 && metrics.cpuUsedPercentage <= 100);
        assert.ok(metrics.memoryTotalMiB > 0);
        assert.ok(metrics.memoryUsedMiB >= 0);
        assert.ok(metrics.memoryUsedMiB <= metrics.memoryTotalMiB);
        assertRecentTimestampMs(metrics.timestamp, 120_000);

        const renewResp = await sandbox.renew(20 * 60);
        assert.ok(renewResp.expiresAt instanceof Date);
        assert.ok(Math.abs(renewResp.expiresAt.getTime() - (Date.now() + 1200_000)) < 10_000);

        const sandbox2 = await Sandbox.connect({
          sandboxId: sandbox.id,
          connectionConfig: sandbox.connectionConfig,
        });
        try {
          assert.equal(sandbox2.id, sandbox.id);
          assert.equal(await sandbox2.isHealthy(), true);
          const r = await sandbox2.commands.run("echo connect-ok");
          assert.equal(r.error, undefined);
          assert.equal(r.logs.stdout[0]?.text, "connect-ok");
        } finally {
          await sandbox2.close();
        }
        // the SDK reports the create to /v1/metrics/events, which sbxd accepts
        await sleep(200);
        assert.ok(
          server.logs.some((l) => l.msg === "request" && l.path === "/v1/metrics/events" && l.status === 204),
        );
      },
    );
  });
}

test("01b manual cleanup sandbox returns null expiresAt", async () => {
  await withSandbox({ timeoutSeconds: null, metadata: { tag: "manual-e2e-test" } }, async (sandbox) => {
    const info = await sandbox.getInfo();
    assert.equal(info.expiresAt, null);
    assert.equal(info.metadata?.tag, "manual-e2e-test");
    await assert.rejects(sandbox.renew(60), (err) => {
      assert.ok(err instanceof SandboxApiException);
      assert.equal(err.statusCode, 409);
      assert.equal(err.error.code, "DOCKER::INVALID_EXPIRATION");
      return true;
    });
  });
});

test("01g sandbox manager: list, filter, get, patch, kill", async () => {
  await withSbxd({}, async (server) => {
    const cfg = server.config();
    const make = (tag) =>
      Sandbox.create({
        connectionConfig: cfg,
        image: IMAGE,
        metadata: { tag, team: "sbx" },
        healthCheckPollingInterval: 100,
      });
    const a = await make("e2e-a");
    const b = await make("e2e-b");
    const manager = SandboxManager.create({ connectionConfig: cfg });
    try {
      const all = await manager.listSandboxInfos({ states: ["Running"], pageSize: 50 });
      assert.deepEqual(new Set(all.items.map((s) => s.id)), new Set([a.id, b.id]));
      assert.equal(all.pagination.totalItems, 2);
      assert.equal(all.pagination.hasNextPage, false);
      // newest first
      assert.deepEqual(all.items.map((s) => s.id), [b.id, a.id]);

      const onlyA = await manager.listSandboxInfos({ metadata: { tag: "e2e-a", team: "sbx" } });
      assert.deepEqual(onlyA.items.map((s) => s.id), [a.id]);
      const none = await manager.listSandboxInfos({ states: ["Paused"] });
      assert.equal(none.items.length, 0);
      const page2 = await manager.listSandboxInfos({ page: 2, pageSize: 1 });
      assert.deepEqual(page2.items.map((s) => s.id), [a.id]);
      assert.equal(page2.pagination.totalPages, 2);

      const info = await manager.getSandboxInfo(a.id);
      assert.equal(info.id, a.id);
      assert.equal(info.metadata?.tag, "e2e-a");

      const patched = await manager.patchSandboxMetadata(a.id, { tag: "renamed", team: null });
      assert.deepEqual(patched.metadata, { tag: "renamed" });
      assert.equal((await a.getInfo()).metadata?.tag, "renamed");

      await manager.killSandbox(a.id);
      await assert.rejects(manager.getSandboxInfo(a.id), (err) => {
        assert.equal(err.statusCode, 404);
        assert.equal(err.error.code, "DOCKER::SANDBOX_NOT_FOUND");
        assert.equal(err.error.message, `Sandbox ${a.id} not found.`);
        return true;
      });
      const after = await manager.listSandboxInfos({});
      assert.deepEqual(after.items.map((s) => s.id), [b.id]);
      await b.kill();
      assert.equal((await manager.listSandboxInfos({})).items.length, 0);
    } finally {
      await manager.close();
      await a.close();
      await b.close();
    }
  });
});

for (const mode of MODES) {
  test(`05 pause and resume (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      await sandbox.commands.run("echo before > /tmp/state");
      await sandbox.pause();
      assert.equal((await sandbox.getInfo()).status.state, "Paused");
      assert.equal(await sandbox.isHealthy(), false);
      await assert.rejects(sandbox.pause(), (err) => err.statusCode === 409);

      const resumed = await sandbox.resume({ readyTimeoutSeconds: 30, healthCheckPollingInterval: 100 });
      try {
        assert.equal(await resumed.isHealthy(), true);
        assert.equal((await resumed.getInfo()).status.state, "Running");
        const echo = await resumed.commands.run("cat /tmp/state; echo resume-ok");
        assert.equal(echo.error, undefined);
        assert.deepEqual(echo.logs.stdout.map((m) => m.text), ["before", "resume-ok"]);
        await assert.rejects(resumed.resume(), (err) => err.statusCode === 409);
      } finally {
        await resumed.close();
      }
    });
  });
}

test("06 x-request-id passthrough on server error", async () => {
  await withSbxd({}, async (server) => {
    const requestId = `e2e-js-server-${Date.now()}`;
    const connectionConfig = new ConnectionConfig({
      domain: server.address,
      protocol: "http",
      apiKey: server.apiKey,
      requestTimeoutSeconds: 30,
      headers: { "X-Request-ID": requestId },
    });
    await assert.rejects(
      Sandbox.connect({ sandboxId: `missing-${requestId}`, connectionConfig }),
      (err) => {
        assert.ok(err instanceof SandboxApiException);
        assert.equal(err.requestId, requestId);
        assert.equal(err.statusCode, 404);
        return true;
      },
    );
  });
});

test("wrong API key is rejected with the server's codes", async () => {
  await withSbxd({}, async (server) => {
    const bad = new ConnectionConfig({ domain: server.address, protocol: "http", apiKey: "nope" });
    await assert.rejects(
      Sandbox.create({ connectionConfig: bad, image: IMAGE }),
      (err) => {
        assert.equal(err.statusCode, 401);
        assert.equal(err.error.code, "INVALID_API_KEY");
        return true;
      },
    );
  });
});

test("unknown image is a clear 400, an alias from sbxd.images works", async () => {
  const { writeFileSync, mkdtempSync } = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const dir = mkdtempSync(path.join(os.tmpdir(), "sbxd-cfg-"));
  const cfgPath = path.join(dir, "config.yaml");
  writeFileSync(cfgPath, "sbxd:\n  images:\n    python:3.11: host\n");
  await withSbxd({ args: ["--config", cfgPath] }, async (server) => {
    await assert.rejects(
      Sandbox.create({ connectionConfig: server.config(), image: "ubuntu:22.04" }),
      (err) => {
        assert.equal(err.statusCode, 400);
        assert.equal(err.error.code, "SANDBOX::IMAGE_NOT_FOUND");
        assert.match(err.error.message, /Image 'ubuntu:22.04' is not in sbxd's local image store/);
        return true;
      },
    );
    const sb = await Sandbox.create({
      connectionConfig: server.config(),
      image: "python:3.11",
      healthCheckPollingInterval: 100,
    });
    try {
      assert.equal((await sb.getInfo()).image?.uri, "python:3.11");
      const r = await sb.commands.run("python3 -c 'print(6*7)'");
      assert.equal(r.logs.stdout[0]?.text, "42");
    } finally {
      await sb.kill();
      await sb.close();
    }
  });
});

test("resource limits map onto the sandbox's cgroup", async () => {
  await withSandbox({ resource: { cpu: "500m", memory: "256Mi" } }, async (sandbox) => {
    const m = await sandbox.getMetrics();
    assert.equal(m.cpuCount, 0.5);
    assert.equal(m.memoryTotalMiB, 256);
  });
});

test("entrypoint runs in the background", async () => {
  await withSandbox(
    { entrypoint: ["sh", "-c", "echo started-$MARK > /tmp/entry; exec sleep 600"], env: { MARK: "ok" } },
    async (sandbox) => {
      let text = "";
      for (let i = 0; i < 50 && text === ""; i++) {
        const r = await sandbox.commands.run("cat /tmp/entry 2>/dev/null || true");
        text = r.logs.stdout[0]?.text ?? "";
        if (text === "") await sleep(100);
      }
      assert.equal(text, "started-ok");
      const ps = await sandbox.commands.run("ps -eo args | grep -c '^sleep 600'");
      assert.equal(ps.logs.stdout[0]?.text, "1");
    },
  );
});
