// The egress API through the official SDK: getEgressPolicy, patchEgressRules and
// deleteEgressRules resolve the endpoint for port 18080 and call sbxd's /policy there, in both the
// direct-endpoint and the server-proxy modes. sbxd's sandbox.network is none here: the test
// seeds the sandbox's net/policy.json as an egress sandbox has it (the datapath's tests make
// real ones) and checks the file after each call, since the file is what the enforcer applies.
// The last test is the real thing: sbxd on sandbox.network egress inside the fake internet of the
// network tests (fakenet_sbxd.py), a sandbox created with the SDK's networkPolicy.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";

import { SandboxApiException } from "@alibaba-group/opensandbox";

import { MODES, withSandbox } from "./helpers.mjs";

const policyPath = (server, id) => path.join(server.home, "sandboxes", id, "net", "policy.json");
const readPolicy = (server, id) => JSON.parse(readFileSync(policyPath(server, id), "utf8"));

for (const mode of MODES) {
  test(`egress policy get, patch, delete (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox, server) => {
      // no egress datapath: the fixed deny-all policy, and changes are refused
      assert.deepEqual(await sandbox.getEgressPolicy(), { defaultAction: "deny", egress: [] });
      await assert.rejects(
        sandbox.patchEgressRules([{ action: "allow", target: "pypi.test" }]),
        (e) => e instanceof SandboxApiException && e.statusCode === 409,
      );
      assert.equal(existsSync(policyPath(server, sandbox.id)), false);

      mkdirSync(path.dirname(policyPath(server, sandbox.id)), { recursive: true });
      writeFileSync(
        policyPath(server, sandbox.id),
        JSON.stringify({ defaultAction: "deny", egress: [{ action: "allow", target: "pypi.test" }] }),
      );
      assert.deepEqual(await sandbox.getEgressPolicy(), {
        defaultAction: "deny",
        egress: [{ action: "allow", target: "pypi.test" }],
      });
      // merge: incoming first, the first rule for a target wins
      await sandbox.patchEgressRules([
        { action: "allow", target: "*.cdn.test" },
        { action: "deny", target: "*.cdn.test" },
        { action: "deny", target: "pypi.test" },
        { action: "allow", target: "203.0.113.0/24" },
      ]);
      const want = {
        defaultAction: "deny",
        egress: [
          { action: "allow", target: "*.cdn.test" },
          { action: "deny", target: "pypi.test" },
          { action: "allow", target: "203.0.113.0/24" },
        ],
      };
      assert.deepEqual(readPolicy(server, sandbox.id), want);
      assert.deepEqual(await sandbox.getEgressPolicy(), want);
      await sandbox.deleteEgressRules(["pypi.test", "never.test"]);
      assert.deepEqual(readPolicy(server, sandbox.id).egress.map((r) => r.target), [
        "*.cdn.test",
        "203.0.113.0/24",
      ]);
      // a bad rule: 400, the policy unchanged
      await assert.rejects(
        sandbox.patchEgressRules([{ action: "allow", target: "bad..test" }]),
        (e) => e instanceof SandboxApiException && e.statusCode === 400,
      );
      await assert.rejects(
        sandbox.deleteEgressRules([]),
        (e) => e instanceof SandboxApiException && e.statusCode === 400,
      );
      assert.equal(readPolicy(server, sandbox.id).egress.length, 2);
      // every egress call took the route of the mode under test
      const egress = server.logs.filter((l) => l.msg === "request" && /\/18080\/policy/.test(l.path));
      assert.ok(egress.length >= 6, `egress requests: ${egress.length}`);
      const viaProxy = (l) => l.path.includes(`/sandboxes/${sandbox.id}/proxy/18080`);
      assert.ok(egress.every((l) => viaProxy(l) === mode.useServerProxy));
    });
  });
}

const canEgress =
  process.getuid?.() === 0 && ["pasta", "nft", "ip", "nsenter"].every((c) => spawnSync("which", [c]).status === 0);

test("create with networkPolicy on an egress sbxd", { skip: !canEgress && "needs root, pasta, nft, ip" }, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sbxd-sdk-net-"));
  const cfg = path.join(dir, "config.yaml");
  writeFileSync(cfg, "sandbox:\n  network: egress\n");
  const networkPolicy = { defaultAction: "deny", egress: [{ action: "allow", target: "pypi.test" }] };
  after(() => rmSync(dir, { recursive: true, force: true }));
  await withSandbox({ sbxd: { fakenet: true, args: ["--config", cfg] }, networkPolicy }, async (sandbox) => {
    assert.deepEqual(await sandbox.getEgressPolicy(), networkPolicy);
    const probe = (url, name) => `curl -s -m 3 -o /dev/null ${url} && echo ${name}=ok || echo ${name}=fail`;
    const run = async (...probes) => {
      const r = await sandbox.commands.run(probes.join("; "));
      return r.logs.stdout.map((m) => m.text.trim()).join(" ");
    };
    assert.equal(
      await run(probe("http://pypi.test:8080/", "pypi"), probe("http://denied.test:8080/", "denied")),
      "pypi=ok denied=fail",
    );
    await sandbox.patchEgressRules([{ action: "allow", target: "denied.test" }]);
    let got = "";
    for (let i = 0; i < 20 && got !== "denied=ok"; i++) got = await run(probe("http://denied.test:8080/", "denied"));
    assert.equal(got, "denied=ok");
  });
});
