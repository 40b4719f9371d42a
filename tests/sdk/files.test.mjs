// Files through the official SDK: OpenSandbox's e2e tests 03 and 03a and the file part of
// execd's smoke_api.py, plus streamed uploads and downloads, in both modes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";

import { MODES, withSandbox } from "./helpers.mjs";

for (const mode of MODES) {
  test(`03 filesystem: CRUD, replace, move, delete, range, stream (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const ts = Date.now();
      const dir1 = `/tmp/fs_test1_${ts}`;
      const dir2 = `/tmp/fs_test2_${ts}`;
      await sandbox.files.createDirectories([
        { path: dir1, mode: 755 },
        { path: dir2, mode: 644 },
      ]);
      const infoMap = await sandbox.files.getFileInfo([dir1, dir2]);
      assert.equal(infoMap[dir1]?.path, dir1);
      assert.equal(infoMap[dir2]?.path, dir2);
      assert.equal(infoMap[dir1]?.type, "directory");
      assert.equal(infoMap[dir1]?.mode, 755);
      assert.equal(infoMap[dir2]?.mode, 644);
      assert.ok(infoMap[dir1]?.modifiedAt instanceof Date);

      const ls = await sandbox.commands.run("ls -la | grep fs_test", { workingDirectory: "/tmp" });
      assert.equal(ls.error, undefined);
      assert.equal(ls.logs.stdout.length, 2);

      const file1 = `${dir1}/test_file1.txt`;
      const file2 = `${dir1}/test_file2.txt`;
      const file3 = `${dir1}/test_file3.txt`;
      const content = "Hello Filesystem!\nLine 2 with special chars: åäö\nLine 3";
      const bytes = new TextEncoder().encode(content);
      const ownerPick = await sandbox.commands.run(
        "id -u nobody >/dev/null 2>&1 && echo nobody || echo root",
      );
      const ownerName = (ownerPick.logs.stdout[0]?.text || "root").trim();
      const groupPick = await sandbox.commands.run(
        "getent group nogroup >/dev/null 2>&1 && echo nogroup || echo root",
      );
      const groupName = (groupPick.logs.stdout[0]?.text || "root").trim();
      assert.equal(ownerName, "nobody");
      assert.equal(groupName, "nogroup");

      await sandbox.files.writeFiles([
        { path: file1, data: content, mode: 644 },
        { path: file2, data: bytes, mode: 755 },
        { path: file3, data: bytes, mode: 755, owner: ownerName, group: groupName },
      ]);
      const written = await sandbox.files.getFileInfo([file1, file2, file3]);
      assert.equal(written[file1].mode, 644);
      assert.equal(written[file2].mode, 755);
      assert.equal(written[file1].size, bytes.length);
      assert.equal(written[file3].owner, ownerName);
      assert.equal(written[file3].group, groupName);
      assert.equal(written[file1].owner, "root");

      const searched = await sandbox.files.search({ path: dir1, pattern: "*" });
      const searchedPaths = new Set(searched.map((f) => f.path));
      assert.ok(searchedPaths.has(file1));
      assert.ok(searchedPaths.has(file2));
      assert.ok(searchedPaths.has(file3));
      const onlyTwo = await sandbox.files.search({ path: dir1, pattern: "*_file{1,2}.txt" });
      assert.deepEqual(onlyTwo.map((f) => f.path).sort(), [file1, file2]);

      const read1 = await sandbox.files.readFile(file1, { encoding: "utf-8" });
      const read1Partial = await sandbox.files.readFile(file1, { encoding: "utf-8", range: "bytes=0-9" });
      const read2 = await sandbox.files.readBytes(file2);
      let read3 = new Uint8Array();
      for await (const chunk of sandbox.files.readBytesStream(file3)) {
        const merged = new Uint8Array(read3.length + chunk.length);
        merged.set(read3, 0);
        merged.set(chunk, read3.length);
        read3 = merged;
      }
      assert.equal(read1, content);
      assert.equal(new TextDecoder("utf-8").decode(read2), content);
      assert.equal(new TextDecoder("utf-8").decode(read3), content);
      assert.equal(read1Partial, content.slice(0, 10));
      const tail = await sandbox.files.readFile(file1, { range: "bytes=-6" });
      assert.equal(tail, "Line 3");

      await sandbox.files.setPermissions([
        { path: file1, mode: 755, owner: ownerName, group: groupName },
        { path: file2, mode: 600, owner: ownerName, group: groupName },
      ]);
      const perms = await sandbox.files.getFileInfo([file1, file2]);
      assert.equal(perms[file1]?.mode, 755);
      assert.equal(perms[file1]?.owner, ownerName);
      assert.equal(perms[file1]?.group, groupName);
      assert.equal(perms[file2]?.mode, 600);
      await assert.rejects(
        sandbox.files.setPermissions([{ path: file1, mode: 644, owner: "no-such-user" }]),
        (err) => err.statusCode === 500,
      );

      const updated1 = `${content}\nAppended line to file1`;
      const updated2 = `${content}\nAppended line to file2`;
      await sandbox.files.writeFiles([
        { path: file1, data: updated1, mode: 644 },
        { path: file2, data: updated2, mode: 755 },
      ]);
      assert.equal(await sandbox.files.readFile(file1), updated1);
      assert.equal(await sandbox.files.readFile(file2), updated2);

      const replaceResults = await sandbox.files.replaceContentsDetailed([
        { path: file1, oldContent: "Appended line to file1", newContent: "Replaced line in file1" },
      ]);
      assert.equal(replaceResults.length, 1);
      assert.equal(replaceResults[0].path, file1);
      assert.equal(replaceResults[0].replacedCount, 1);
      const replaced = await sandbox.files.readFile(file1);
      assert.ok(replaced.includes("Replaced line in file1"));
      assert.ok(!replaced.includes("Appended line to file1"));

      const noMatch = await sandbox.files.replaceContentsDetailed([
        { path: file1, oldContent: "this string does not exist", newContent: "irrelevant" },
      ]);
      assert.equal(noMatch[0].replacedCount, 0);
      assert.equal(await sandbox.files.readFile(file1), replaced);

      const multiFile = `${dir1}/multi_match.txt`;
      await sandbox.files.writeFiles([{ path: multiFile, data: "foo bar foo baz foo" }]);
      const multi = await sandbox.files.replaceContentsDetailed([
        { path: multiFile, oldContent: "foo", newContent: "qux" },
      ]);
      assert.equal(multi[0].replacedCount, 3);
      assert.equal(await sandbox.files.readFile(multiFile), "qux bar qux baz qux");

      const batchA = `${dir1}/batch_a.txt`;
      const batchB = `${dir1}/batch_b.txt`;
      await sandbox.files.writeFiles([
        { path: batchA, data: "hello world" },
        { path: batchB, data: "hello hello" },
      ]);
      const batch = await sandbox.files.replaceContentsDetailed([
        { path: batchA, oldContent: "hello", newContent: "hi" },
        { path: batchB, oldContent: "hello", newContent: "hi" },
      ]);
      const byPath = Object.fromEntries(batch.map((r) => [r.path, r.replacedCount]));
      assert.equal(byPath[batchA], 1);
      assert.equal(byPath[batchB], 2);
      assert.equal(await sandbox.files.readFile(batchA), "hi world");
      assert.equal(await sandbox.files.readFile(batchB), "hi hi");
      await sandbox.files.replaceContents([
        { path: file1, oldContent: "Replaced line in file1", newContent: "Final line in file1" },
      ]);
      assert.ok((await sandbox.files.readFile(file1)).includes("Final line in file1"));

      const movedPath = `${dir2}/sub/moved_file3.txt`;
      await sandbox.files.moveFiles([{ src: file3, dest: movedPath }]);
      assert.equal(await sandbox.files.readFile(movedPath), content);
      await assert.rejects(sandbox.files.readFile(file3), (err) => err.statusCode === 404);
      await assert.rejects(
        sandbox.files.moveFiles([{ src: file1, dest: movedPath }]),
        (err) => err.statusCode === 500,
      );

      const listed = await sandbox.files.listDirectory({ path: dir2, depth: 2 });
      assert.deepEqual(listed.map((f) => f.path), [`${dir2}/sub`, movedPath]);
      assert.deepEqual(listed.map((f) => f.type), ["directory", "file"]);

      await sandbox.files.deleteFiles([file2]);
      await assert.rejects(sandbox.files.readFile(file2), (err) => err.statusCode === 404);
      await sandbox.files.deleteFiles([file2]); // a missing file is ignored

      await sandbox.files.deleteDirectories([dir1, dir2]);
      const verify = await sandbox.commands.run(`test ! -d ${dir1} && test ! -d ${dir2} && echo OK`);
      assert.equal(verify.error, undefined);
      assert.equal(verify.logs.stdout[0]?.text, "OK");
      await assert.rejects(sandbox.files.getFileInfo([dir1]), (err) => {
        assert.equal(err.statusCode, 404);
        assert.equal(err.error.code, "FILE_NOT_FOUND");
        return true;
      });
    });
  });
}

for (const mode of MODES) {
  test(`03a line-based file reading with offset and limit (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const testPath = "/tmp/line-read-e2e.txt";
      await sandbox.files.writeFiles([{ path: testPath, data: "line1\nline2\nline3\nline4\nline5" }]);
      assert.equal(await sandbox.files.readFile(testPath, { offset: 2, limit: 2 }), "line2\nline3");
      assert.equal(await sandbox.files.readFile(testPath, { offset: 4 }), "line4\nline5");
      assert.equal(await sandbox.files.readFile(testPath, { limit: 2 }), "line1\nline2");
      await assert.rejects(
        sandbox.files.readFile(testPath, { offset: 1, range: "bytes=0-1" }),
        (err) => err.statusCode === 400,
      );
      await sandbox.files.deleteFiles([testPath]);
    });
  });
}

for (const mode of MODES) {
  test(`uploads stream: an async iterable of 24 MiB, then a download stream (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      const chunks = [];
      for (let i = 0; i < 24; i++) chunks.push(randomBytes(1 << 20));
      const want = createHash("sha256");
      for (const c of chunks) want.update(c);
      async function* gen() {
        for (const c of chunks) yield c;
      }
      // an async iterable takes the SDK's hand-built multipart path (custom boundary, streamed)
      await sandbox.files.writeFiles([{ path: "/tmp/big/blob.bin", data: gen(), mode: 600 }]);
      const info = await sandbox.files.getFileInfo(["/tmp/big/blob.bin"]);
      assert.equal(info["/tmp/big/blob.bin"].size, 24 << 20);
      assert.equal(info["/tmp/big/blob.bin"].mode, 600);
      const sum = await sandbox.commands.run("sha256sum /tmp/big/blob.bin");
      assert.equal(sum.logs.stdout[0]?.text.split(" ")[0], want.digest("hex"));
      const got = createHash("sha256");
      let n = 0;
      for await (const chunk of sandbox.files.readBytesStream("/tmp/big/blob.bin")) {
        got.update(chunk);
        n += chunk.length;
      }
      assert.equal(n, 24 << 20);
      const again = createHash("sha256");
      for (const c of chunks) again.update(c);
      assert.equal(got.digest("hex"), again.digest("hex"));
    });
  });
}

for (const mode of MODES) {
  test(`paths: ~ expands to /root, relative paths start at / (${mode.name})`, async () => {
    await withSandbox({ useServerProxy: mode.useServerProxy }, async (sandbox) => {
      await sandbox.files.writeFiles([{ path: "~/home-file.txt", data: "home path content\n" }]);
      assert.equal(await sandbox.files.readFile("/root/home-file.txt"), "home path content\n");
      assert.equal(await sandbox.files.readFile("~/home-file.txt"), "home path content\n");
      await sandbox.files.deleteFiles(["~/home-file.txt"]);
      await assert.rejects(sandbox.files.readFile("/root/home-file.txt"), (err) => err.statusCode === 404);
    });
  });
}
