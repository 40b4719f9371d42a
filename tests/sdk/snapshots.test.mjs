// Snapshots through the official SDK (0.1.11 has them): SandboxManager's createSnapshot,
// getSnapshot, listSnapshots and deleteSnapshot, and Sandbox.create({snapshotId}), against sbxd
// with a busybox image built offline (tests/images/mkimage.py) in its store.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Sandbox, SandboxApiException, SandboxManager } from "@alibaba-group/opensandbox";

import { SBX, sleep, withSbxd } from "./helpers.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const BB = "busybox:test";

function importImage(home) {
  const tar = path.join(home, "bb.tar");
  const mk = spawnSync("python3", [path.join(here, "../images/mkimage.py"), tar, "--name", BB]);
  assert.equal(mk.status, 0, String(mk.stderr));
  const imp = spawnSync(SBX, ["--home", home, "image", "import", tar]);
  assert.equal(imp.status, 0, String(imp.stderr));
}

async function untilSettled(manager, id) {
  for (let i = 0; i < 600; i++) {
    const s = await manager.getSnapshot(id);
    if (s.status.state !== "Creating") return s;
    await sleep(100);
  }
  throw new Error(`snapshot ${id} still Creating`);
}

test("snapshots: create, get, list, restore with Sandbox.create({snapshotId}), delete", async () => {
  await withSbxd({}, async (server) => {
    importImage(server.home);
    const connectionConfig = server.config();
    const manager = SandboxManager.create({ connectionConfig });
    const opts = { connectionConfig, readyTimeoutSeconds: 30, healthCheckPollingInterval: 100 };
    const src = await Sandbox.create({ ...opts, image: BB, entrypoint: ["tail", "-f", "/dev/null"] });
    let restored = null;
    try {
      const w = await src.commands.run("mkdir -p /usr/local/share && echo from-sdk > /usr/local/share/f");
      assert.equal(w.error, undefined);

      const snap = await manager.createSnapshot(src.id, { name: "sdk-snap" });
      assert.equal(snap.sandboxId, src.id);
      assert.equal(snap.name, "sdk-snap");
      assert.equal(snap.status.state, "Creating");
      assert.ok(snap.createdAt instanceof Date);
      const ready = await untilSettled(manager, snap.id);
      assert.equal(ready.status.state, "Ready", JSON.stringify(ready));
      assert.ok(ready.status.lastTransitionAt instanceof Date);

      const list = await manager.listSnapshots({ sandboxId: src.id, states: ["Ready"] });
      assert.deepEqual(list.items.map((s) => s.id), [snap.id]);
      assert.equal(list.pagination.totalItems, 1);
      assert.equal((await manager.listSnapshots({ name: "other" })).items.length, 0);

      restored = await Sandbox.create({ ...opts, snapshotId: snap.id });
      const out = await restored.commands.run("cat /usr/local/share/f");
      assert.equal(out.logs.stdout[0]?.text, "from-sdk");
      const info = await restored.getInfo();
      assert.equal(info.snapshotId, snap.id);

      // in use by `restored`: refused, with the server's code
      await assert.rejects(manager.deleteSnapshot(snap.id), (e) => {
        assert.ok(e instanceof SandboxApiException);
        assert.equal(e.statusCode, 409);
        return true;
      });
      await restored.kill();
      await restored.close();
      restored = null;
      await manager.deleteSnapshot(snap.id);
      await assert.rejects(manager.getSnapshot(snap.id), (e) => e.statusCode === 404);
    } finally {
      if (restored) await restored.kill().catch(() => {});
      await src.kill().catch(() => {});
      await src.close().catch(() => {});
      await manager.close().catch(() => {});
    }
  });
});
