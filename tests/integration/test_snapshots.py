"""Snapshots (docs/images.md, "Snapshots"): `sbx commit` stores a sandbox's writable root as a new
image on top of its own (whiteouts, opaque directories, hard links, owners and the image's config
carried over), a running sandbox is frozen only while its upper is read, and sbxd serves
OpenSandbox's /snapshots API on top of it (create, list, get, delete, create with snapshotId).
Images are built offline by tests/images/mkimage.py."""
import json
import os
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from conftest import SOURCE

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402

from test_sbxd_http import sbxd  # noqa: E402,F401  (the fixture)

BB = "busybox:test"


def sh(sbx, thread, command, image=None, check=True):
    args = ["exec", "-t", thread, "--json"] + (["--image", image] if image else []) + ["--", command]
    p = sbx.run(*args, timeout=120)
    assert p.stdout, p.stderr
    j = json.loads(p.stdout)
    if check:
        assert j["exit_code"] == 0, j
    return j


def index(sbx):
    with open(os.path.join(sbx.home, "images", "index.json")) as f:
        return json.load(f)["images"]


def blob(sbx, digest):
    return os.path.join(sbx.home, "images", "blobs", "sha256", digest.split(":")[-1])


def work_left(sbx):
    d = os.path.join(sbx.home, "images", "tmp")
    return [n for n in os.listdir(d) if n.startswith(("commit-", "import-"))] if os.path.isdir(d) else []


@pytest.fixture
def bb(sbx, tmp_path):
    """busybox:test with a second layer to delete from: /opt/a, /opt/d/{x,y}, /opt/keep."""
    p = str(tmp_path / "bb.tar")
    extra = mkimage.layer([("opt", "dir"), ("opt/a", b"A"), ("opt/d", "dir"), ("opt/d/x", b"X"),
                           ("opt/d/y", b"Y"), ("opt/keep", b"K")])
    mkimage.build_docker(p, [(BB, [mkimage.busybox_layer(), extra], None)])
    sbx.ok("image", "import", p)
    return BB


def setuid_allowed(sbx):
    """Scope sandboxes may set setuid bits only where host root's files stay unmapped in their
    thread folder (`map_host_root: false`: docs/security.md, the setid guard)."""
    if sbx.config:
        with open(sbx.config, "a") as f:
            f.write("  map_host_root: false\n")
    else:
        os.makedirs(sbx.home, exist_ok=True)
        with open(os.path.join(sbx.home, "config.yaml"), "w") as f:
            f.write("sandbox:\n  map_host_root: false\n")


@pytest.mark.idmap
def test_commit_then_run_from_it(sbx, bb):
    setuid_allowed(sbx)
    sh(sbx, "src", "mkdir -p /usr/local/bin /srv/pkg && "
       "printf '#!/bin/sh\\necho tool-ran\\n' > /usr/local/bin/tool && chmod 4755 /usr/local/bin/tool && "
       "ln /usr/local/bin/tool /usr/local/bin/tool2 && ln -s tool /usr/local/bin/tool-link && "
       "mkfifo /srv/fifo && echo data > /srv/pkg/file && chown 1000:1000 /srv/pkg/file && "
       "rm /opt/a && rm -rf /opt/d && mkdir /opt/d && echo z > /opt/d/z && "
       "echo scratch > /tmp/not-committed && echo ws > /mnt/user-data/workspace/not-committed",
       image=bb)
    p = sbx.run("commit", "-t", "src", "snap:v1", check=0)
    name, digest = p.stdout.decode().split()
    assert name == "snap:v1" and digest.startswith("sha256:")
    imgs = index(sbx)
    parent, snap = imgs[BB], imgs["snap:v1"]
    assert snap["digest"] == digest
    # its parent's layers, then one new one; the config keeps the env and records the commit
    assert snap["layers"][:-1] == parent["layers"] and len(snap["layers"]) == len(parent["layers"]) + 1
    assert snap["env"] == parent["env"] and "IMAGE_VAR=from-image" in snap["env"]
    with open(blob(sbx, snap["config"])) as f:
        cfg = json.load(f)
    assert cfg["history"][-1]["created_by"].startswith("sbx commit ")
    assert cfg["rootfs"]["diff_ids"][-1] == "sha256:" + snap["layers"][-1]
    # the layer itself: OCI whiteouts, an opaque marker, 0-based owners, no generated /etc files
    with open(blob(sbx, digest)) as f:
        man = json.load(f)
    assert man["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    top = man["layers"][-1]
    assert top["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    with tarfile.open(blob(sbx, top["digest"])) as t:
        members = {m.name: m for m in t.getmembers()}
    assert "opt/.wh.a" in members and "opt/d/.wh..wh..opq" in members, sorted(members)
    assert members["srv/pkg/file"].uid == 1000 and members["srv/pkg/file"].gid == 1000
    assert members["usr/local/bin/tool"].uid == 0 and members["usr/local/bin/tool"].mode == 0o4755
    assert members["usr/local/bin/tool2"].islnk() and members["srv/fifo"].isfifo()
    assert not any(n in members for n in ("etc/hostname", "etc/hosts", "etc/resolv.conf"))
    assert not any(n.startswith(("tmp/", "mnt/")) for n in members), sorted(members)
    assert work_left(sbx) == []

    # a new sandbox of the snapshot has everything, and the deleted files stay deleted
    out = sh(sbx, "dst", "/usr/local/bin/tool; cat /srv/pkg/file; stat -c '%u:%g %a' /srv/pkg/file "
             "/usr/local/bin/tool; readlink /usr/local/bin/tool-link; stat -c %h /usr/local/bin/tool; "
             "ls /opt; ls /opt/d; test -p /srv/fifo && echo fifo; echo $IMAGE_VAR; "
             "ls /tmp/not-committed 2>&1; hostname",
             image="snap:v1")["output"].split()
    assert out[:4] == ["tool-ran", "data", "1000:1000", "644"], out
    assert out[4:8] == ["0:0", "4755", "tool", "2"], out
    assert out[8:10] == ["d", "keep"] and out[10] == "z", out
    assert out[11:13] == ["fifo", "from-image"], out
    assert "No" in out[13:] and out[-1] != "", out
    # the source keeps running, thawed
    assert sh(sbx, "src", "echo alive")["output"].strip() == "alive"
    # a snapshot of a snapshot: one more layer
    sh(sbx, "dst", "echo second > /srv/second")
    sbx.ok("commit", "-t", "dst", "snap:v2")
    assert len(index(sbx)["snap:v2"]["layers"]) == len(snap["layers"]) + 1
    assert sh(sbx, "dst2", "cat /srv/second /srv/pkg/file", image="snap:v2")["output"].split() == \
        ["second", "data"]


@pytest.mark.idmap
def test_commit_refusals_change_nothing(sbx, bb):
    sh(sbx, "img", "echo x > /x", image=bb)
    before = index(sbx)
    for name, words in [("", "name"), ("host", "reserved"), ("Bad:tag", "Bad"),
                        ("bad name", "bad name"), ("x:" + "t" * 200, "x:"),
                        ("snap@sha256:" + "a" * 64, "digest"), ("sha256:" + "b" * 64, "reserved")]:
        p = sbx.run("commit", "-t", "img", name)
        assert p.returncode != 0, name
        assert words.lower() in p.stderr.decode().lower(), (name, p.stderr)
    # a `host` sandbox has no writable root
    sh(sbx, "onhost", "true")
    p = sbx.run("commit", "-t", "onhost", "h:1")
    assert p.returncode == 1 and b"`host` image" in p.stderr, p.stderr
    # no such sandbox
    p = sbx.run("commit", "-t", "nobody", "n:1")
    assert p.returncode == 1 and b"does not exist" in p.stderr, p.stderr
    assert sbx.run("commit", "-t", "img").returncode == 2  # usage: the name is required
    assert index(sbx) == before and work_left(sbx) == []


@pytest.mark.idmap
def test_commit_while_it_writes(sbx, bb):
    sh(sbx, "w", "true", image=bb)
    writer = subprocess.Popen(sbx.cmd("exec", "-t", "w", "--", "i=0; while [ $i -lt 4000 ]; do "
                                      "i=$((i+1)); echo $i >> /var-log; echo $i > /last; done; "
                                      "echo finished"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while sh(sbx, "w", "cat /last 2>/dev/null || echo 0")["output"].strip() in ("", "0"):
            assert time.time() < deadline
            time.sleep(0.05)
        sbx.ok("commit", "-t", "w", "during:1")
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0 and b"finished" in out, (out, err)  # thawed: it went on
    lines = sh(sbx, "r", "cat /var-log; echo last=$(cat /last)", image="during:1")["output"].split()
    # one instant: the log is whole, numbered 1..k (an append is one write), and /last is k, or
    # empty when the instant fell between its truncation and its write
    log, last = lines[:-1], lines[-1].split("=")[1]
    assert log == [str(i) for i in range(1, len(log) + 1)], log[-5:]
    assert 1 <= len(log) <= 4000 and last in (str(len(log)), str(len(log) - 1), ""), lines[-3:]


@pytest.mark.idmap
def test_commit_of_50mb_does_not_stall_another_sandbox(sbx, bb):
    sh(sbx, "big", "dd if=/dev/urandom of=/blob bs=1M count=50 2>/dev/null", image=bb)
    sh(sbx, "other", "true", image=bb)
    done = {}

    def commit():
        t0 = time.monotonic()
        done["p"] = sbx.run("commit", "-t", "big", "big:1", timeout=300)
        done["t"] = time.monotonic() - t0

    th = threading.Thread(target=commit)
    th.start()
    lat = []
    while th.is_alive():
        t0 = time.monotonic()
        assert sh(sbx, "other", "echo ok")["output"].strip() == "ok"
        lat.append(time.monotonic() - t0)
    th.join()
    assert done["p"].returncode == 0, done["p"].stderr
    assert lat and max(lat) < 5, (lat, done["t"])
    sizes = sh(sbx, "check", "wc -c < /blob", image="big:1")["output"].split()
    assert sizes == ["52428800"]


# ---- sbxd: OpenSandbox's snapshot API ----

def wait_snapshot(s, sid, timeout=120):
    deadline = time.time() + timeout
    while True:
        r = s.req("GET", "/v1/snapshots/%s" % sid)
        assert r.status == 200, r.body
        j = r.json()
        if j["status"]["state"] != "Creating" or time.time() > deadline:
            return j
        time.sleep(0.1)


@pytest.mark.idmap
def test_sbxd_snapshots(sbxd, tmp_path, bb):
    from conftest import Sbx
    home = tmp_path / "home"
    assert os.path.isdir(home / "images")  # the bb fixture's store is this home's
    s = sbxd(home=home)
    sb = s.create(image={"uri": BB}, entrypoint=["sleep", "1000"])
    out, last = sb.run("mkdir -p /usr/local/lib && echo pkg > /usr/local/lib/pkg && rm /opt/keep "
                       "&& echo ok")
    assert out == ["ok"], (out, last)

    # shapes and errors of the create
    r = s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id, {"name": "before-import"})
    assert r.status == 202, r.body
    snap = r.json()
    assert set(snap) == {"id", "sandboxId", "name", "status", "createdAt"}, snap
    assert snap["sandboxId"] == sb.id and snap["name"] == "before-import"
    assert snap["status"]["state"] == "Creating" and snap["status"]["reason"] == "snapshot_accepted"
    for body, code in [({"nope": 1}, 422), ({"name": ""}, 422), ({"name": 3}, 422), ([], 422)]:
        r = s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id, body)
        assert r.status == code and r.error()[0] == "SANDBOX::VALIDATION_ERROR", (body, r.body)
    r = s.req("POST", "/v1/sandboxes/0123456789abcdef/snapshots", {})
    assert r.status == 404 and r.error()[0] == "DOCKER::SANDBOX_NOT_FOUND"
    r = s.req("DELETE", "/v1/snapshots/%s" % snap["id"])
    assert r.status in (204, 409)  # 409 while Creating (it may already be Ready)
    if r.status == 409:
        assert r.error()[0] == "SNAPSHOT::INVALID_STATE"
        ready = wait_snapshot(s, snap["id"])
    else:
        r = s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id, {"name": "before-import"})
        snap = r.json()
        ready = wait_snapshot(s, snap["id"])
    assert ready["status"]["state"] == "Ready", ready
    assert ready["status"]["reason"] == "snapshot_runtime_ready"
    assert ready["createdAt"] == snap["createdAt"]
    assert "lastTransitionAt" in ready["status"]

    # an unnamed one, with no body at all; the list filters
    r = s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id)
    assert r.status == 202, r.body
    second = r.json()
    assert "name" not in second
    wait_snapshot(s, second["id"])
    lst = s.req("GET", "/v1/snapshots").json()
    assert [i["id"] for i in lst["items"]] == [second["id"], snap["id"]]
    assert lst["pagination"] == {"page": 1, "pageSize": 20, "totalItems": 2, "totalPages": 1,
                                 "hasNextPage": False}
    assert s.req("GET", "/v1/snapshots?sandboxId=nope").json()["items"] == []
    assert len(s.req("GET", "/v1/snapshots?sandboxId=%s&state=Ready" % sb.id).json()["items"]) == 2
    assert s.req("GET", "/v1/snapshots?state=Failed&state=Creating").json()["items"] == []
    p2 = s.req("GET", "/v1/snapshots?page=2&pageSize=1").json()
    assert [i["id"] for i in p2["items"]] == [snap["id"]] and not p2["pagination"]["hasNextPage"]
    assert s.req("GET", "/v1/snapshots?page=0").status == 422
    r = s.req("GET", "/v1/snapshots/00000000-0000-4000-8000-000000000000")
    assert r.status == 404 and r.error()[0] == "SNAPSHOT::NOT_FOUND"
    assert s.req("GET", "/v1/snapshots/..%2f..%2fx").status == 404

    # restore: no entrypoint needed (tail -f /dev/null), the files are there, the deletion too
    body = {"snapshotId": snap["id"], "resourceLimits": {"cpu": "1", "memory": "1Gi"},
            "timeout": 600}
    r = s.req("POST", "/v1/sandboxes", body)
    assert r.status == 202, r.body
    assert r.json()["entrypoint"] == ["tail", "-f", "/dev/null"]
    from test_sbxd_http import Sandbox
    restored = Sandbox(s, r.json()["id"])
    out, _ = restored.run("cat /usr/local/lib/pkg; ls /opt; echo $IMAGE_VAR")
    assert out == ["pkg", "a", "d", "from-image"], out
    info = s.req("GET", "/v1/sandboxes/%s" % restored.id).json()
    assert info["snapshotId"] == snap["id"] and "image" not in info
    r = s.req("POST", "/v1/sandboxes", dict(body, snapshotId="00000000-0000-4000-8000-000000000000"))
    assert r.status == 404 and r.error()[0] == "SNAPSHOT::NOT_FOUND"
    r = s.req("POST", "/v1/sandboxes", dict(body, image={"uri": BB}, entrypoint=["true"]))
    assert r.status == 422

    # in use by the restored sandbox: the delete is refused and the snapshot stays Ready
    r = s.req("DELETE", "/v1/snapshots/%s" % snap["id"])
    assert r.status == 409 and r.error()[0] == "SNAPSHOT::DELETE_CONFLICT", r.body
    assert wait_snapshot(s, snap["id"])["status"]["state"] == "Ready"
    assert s.req("DELETE", "/v1/sandboxes/%s" % restored.id).status == 204
    assert s.req("DELETE", "/v1/snapshots/%s" % snap["id"]).status == 204
    assert s.req("GET", "/v1/snapshots/%s" % snap["id"]).status == 404
    assert "opensandbox-snapshots:%s" % snap["id"] not in index(Sbx(home))

    # a paused sandbox, a `host` one
    assert s.req("POST", "/v1/sandboxes/%s/pause" % sb.id).status == 202
    r = s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id, {})
    assert r.status == 409 and r.error()[0] == "SNAPSHOT::INVALID_SOURCE_STATE"
    assert s.req("POST", "/v1/sandboxes/%s/resume" % sb.id).status == 202
    onhost = s.create()
    r = s.req("POST", "/v1/sandboxes/%s/snapshots" % onhost.id, {})
    assert r.status == 501 and "`host` image" in r.error()[1]

    # snapshots outlive their sandbox and sbxd
    assert s.req("DELETE", "/v1/sandboxes/%s" % sb.id).status == 204
    assert s.stop() == 0
    s.killed = True
    s2 = sbxd(home=home)
    got = s2.req("GET", "/v1/snapshots/%s" % second["id"]).json()
    assert got["status"]["state"] == "Ready" and got["sandboxId"] == sb.id


@pytest.mark.idmap
def test_commit_bounded_by_the_layer_limits(make_sbx, tmp_path):
    # the sandbox writes what it likes: a commit stops at the import's bounds, and stores nothing
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image_layer_max_mib: 1\n")
    s = make_sbx(config=str(cfg))
    p = str(tmp_path / "bb.tar")
    mkimage.build_docker(p, [(BB, [mkimage.busybox_layer()], None)])
    s.ok("image", "import", "--max-size", "16", p)
    sh(s, "big", "dd if=/dev/zero of=/big bs=1M count=2 2>/dev/null", image=BB)
    before = index(s)
    r = s.run("commit", "-t", "big", "big:1")
    assert r.returncode == 1 and b"image_layer_max_mib" in r.stderr and b"/big" in r.stderr, r.stderr
    assert index(s) == before and work_left(s) == []
    sh(s, "big", "rm /big && echo small > /small")
    s.ok("commit", "-t", "big", "small:1")
    assert sh(s, "chk", "cat /small; ls /big 2>&1 | wc -l", image="small:1")["output"].split() == \
        ["small", "1"]
