"""Images (docs/images.md): import of the three formats with every digest verified, safe layer
extraction, the overlay root with a writable upper, the verbs images/rmi/prune. The images are
built here, offline, from busybox-static (tests/images/mkimage.py)."""
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import SOURCE, idmap_blocker

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402

BB = "busybox:test"


def store(sbx):
    return os.path.join(sbx.home, "images")


def listing(sbx):
    return {i["name"]: i for i in sbx.json("images", "--json")["images"]}


def blobs(sbx):
    d = os.path.join(store(sbx), "blobs", "sha256")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def layers(sbx):
    d = os.path.join(store(sbx), "layers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def sh(sbx, thread, command, image=None):
    args = ["exec", "-t", thread, "--json"] + (["--image", image] if image else []) + ["--", command]
    p = sbx.run(*args)
    assert p.stdout, p.stderr
    return json.loads(p.stdout)


@pytest.fixture
def bb_docker(tmp_path):
    p = str(tmp_path / "bb-docker.tar")
    mkimage.build_docker(p, [(BB, [mkimage.busybox_layer()], None)])
    return p


@pytest.mark.parametrize("fmt,comp", [("docker", None), ("oci", "zstd"), ("oci-dir", "gzip"),
                                      ("oci", None)])
@pytest.mark.idmap
def test_import_formats_and_run(sbx, tmp_path, fmt, comp):
    out = str(tmp_path / ("img" + ("" if fmt == "oci-dir" else ".tar")))
    imgs = [(BB, [mkimage.busybox_layer()], comp)]
    if fmt == "docker":
        mkimage.build_docker(out, imgs)
    else:
        mkimage.build_oci(out, imgs, as_dir=fmt == "oci-dir")
    assert sbx.ok("image", "import", out).split() == [BB]
    img = listing(sbx)[BB]
    assert img["digest"].startswith("sha256:") and img["size"] > 1000000 and img["in_use"] == 0
    r = sh(sbx, "t", "id -u; cat /etc/hostname; echo $IMAGE_VAR; busybox | head -1", image=BB)
    assert r["exit_code"] == 0, r
    lines = r["stdout"].split("\n")
    assert lines[0] == "0" and lines[1].startswith("sbx-") and lines[2] == "from-image"
    assert "BusyBox" in lines[3]
    assert listing(sbx)[BB]["in_use"] == 1
    # nothing of the host's /usr is there
    assert sh(sbx, "t", "test -e /usr/bin/python3 || test -e /usr/lib/os-release; echo $?")["stdout"] == "1\n"


@pytest.mark.idmap
def test_writable_root_persists_until_rm(sbx, bb_docker):
    sbx.ok("image", "import", bb_docker)
    r = sh(sbx, "w", "echo pkg > /usr/bin/installed && mkdir -p /opt/x && echo ok > /opt/x/y && "
           "rm /bin/wc && cat /usr/bin/installed", image=BB)
    assert r["exit_code"] == 0 and r["stdout"] == "pkg\n", r
    sbx.ok("release", "-t", "w")
    r = sh(sbx, "w", "cat /usr/bin/installed /opt/x/y; test -e /bin/wc; echo $?")
    assert r["stdout"] == "pkg\nok\n1\n", r
    # the layer itself is untouched, and a second sandbox of the image does not see it
    lid = layers(sbx)[0]
    assert os.path.exists(os.path.join(store(sbx), "layers", lid, "bin", "wc"))
    assert sh(sbx, "other", "test -e /usr/bin/installed; echo $?", image=BB)["stdout"] == "1\n"
    upper = [d for d in os.listdir(os.path.join(sbx.home, "sandboxes"))]
    assert any(os.path.exists(os.path.join(sbx.home, "sandboxes", d, "upper", "usr", "bin",
                                           "installed")) for d in upper)
    sbx.ok("rm", "-t", "w")
    assert sh(sbx, "w", "test -e /usr/bin/installed; echo $?", image=BB)["stdout"] == "1\n"


@pytest.mark.idmap
def test_config_image_key(make_sbx, tmp_path, bb_docker):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image: busybox:test\n")
    s = make_sbx(config=str(cfg))
    s.ok("image", "import", bb_docker)
    r = sh(s, "c", "busybox | head -1; test -d /usr/lib/x86_64-linux-gnu; echo $?")
    assert "BusyBox" in r["stdout"] and r["stdout"].endswith("1\n"), r
    s.down()


def test_host_stays_default(sbx, bb_docker):
    sbx.ok("image", "import", bb_docker)
    r = sh(sbx, "h", "test -x /usr/bin/python3 -o -x /usr/bin/perl -o -x /usr/bin/ls; echo $?")
    assert r["stdout"] == "0\n"


@pytest.mark.idmap
def test_layers_whiteouts_opaque_hardlinks_setuid(sbx, tmp_path):
    base = mkimage.busybox_layer()
    l1 = mkimage.layer([("etc/gone", b"x"), ("etc/kept", b"k"), ("d", "dir"), ("d/a", b"a"),
                        ("d/b", b"b"), ("opt", "dir"), ("opt/suid", ("mode", b"#!/bin/sh\n", 0o4755)),
                        ("opt/data", ("owner", b"o", 1000, 1000)),
                        ("opt/link1", ("hard", "opt/data")), ("opt/sym", ("link", "/etc/kept"))])
    l2 = mkimage.layer([("etc/.wh.gone", b""), ("d/.wh..wh..opq", b""), ("d/c", b"c")])
    out = str(tmp_path / "ml.tar")
    mkimage.build_oci(out, [("multi:1", [base, l1, l2], "gzip")])
    assert sbx.ok("image", "import", out).split() == ["multi:1"]
    r = sh(sbx, "m", "ls /d; test -e /etc/gone; echo gone=$?; cat /etc/kept; echo; "
           "stat -c '%a %u' /opt/suid; stat -c '%i %u %g %h' /opt/data /opt/link1; "
           "readlink /opt/sym; cat /opt/sym", image="multi:1")
    assert r["exit_code"] == 0, r
    out = r["stdout"].split("\n")
    assert out[0] == "c" and out[1] == "gone=1" and out[2] == "k", out
    assert out[3] == "4755 0", out
    assert out[4] == out[5] and out[4].split()[1:] == ["1000", "1000", "2"], out
    assert out[6] == "/etc/kept" and out[7] == "k", out


@pytest.mark.idmap
def test_manifest_list_and_platform(sbx, tmp_path):
    a = mkimage.layer([("which", b"amd64")])
    b = mkimage.layer([("which", b"arm64")])
    bb = mkimage.busybox_layer()
    out = str(tmp_path / "list.tar")
    mkimage.build_oci(out, [("multi:arch", [bb, a], None), ("multi:arch", [bb, b], None)],
                      index_list=True)
    sbx.ok("image", "import", out)
    assert sh(sbx, "p", "cat /which", image="multi:arch")["stdout"] == "amd64"
    sbx.ok("image", "import", "--platform", "linux/arm64", "--name", "multi:arm", out)
    assert sh(sbx, "q", "cat /which", image="multi:arm")["stdout"] == "arm64"
    p = sbx.run("image", "import", "--platform", "linux/mips", "--name", "x", out)
    assert p.returncode == 1 and b"linux/mips" in p.stderr
    p = sbx.run("image", "import", "--platform", "nonsense", out)
    assert p.returncode == 1 and b"OS/ARCH" in p.stderr


def _oci_files(tmp_path, comp=None):
    d = str(tmp_path / "lay")
    mkimage.build_oci(d, [(BB, [mkimage.busybox_layer()], comp)], as_dir=True)
    return d


def _index(d):
    return json.load(open(os.path.join(d, "index.json")))


def _manifest(d):
    dg = _index(d)["manifests"][0]["digest"][7:]
    return dg, json.load(open(os.path.join(d, "blobs", "sha256", dg)))


def _rewrite_manifest(d, m):
    data = json.dumps(m).encode()
    dg = mkimage.sha(data)
    open(os.path.join(d, "blobs", "sha256", dg), "wb").write(data)
    ix = _index(d)
    ix["manifests"][0].update(digest="sha256:" + dg, size=len(data))
    json.dump(ix, open(os.path.join(d, "index.json"), "w"))


def assert_refused(sbx, path, *words):
    before = (blobs(sbx), layers(sbx))
    p = sbx.run("image", "import", path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    for w in words:
        assert w.encode() in p.stderr, (w, p.stderr)
    assert BB not in listing(sbx)
    assert (blobs(sbx), layers(sbx)) == before
    tmp = os.path.join(store(sbx), "tmp")
    assert not os.path.isdir(tmp) or os.listdir(tmp) == []
    return p.stderr.decode()


def test_malformed_inputs_store_nothing(sbx, tmp_path):
    # positive control first: the untouched layout imports
    good = _oci_files(tmp_path / "good")
    d = _oci_files(tmp_path)
    mdg, m = _manifest(d)
    layer = m["layers"][0]["digest"][7:]
    lp = os.path.join(d, "blobs", "sha256", layer)
    data = open(lp, "rb").read()
    # a digest mismatch (one byte changed, same size)
    open(lp, "wb").write(data[:-1] + bytes([data[-1] ^ 1]))
    assert_refused(sbx, d, "sha256:" + layer, "digest mismatch")
    # truncated
    open(lp, "wb").write(data[:len(data) // 2])
    assert_refused(sbx, d, "sha256:" + layer, "truncated")
    # missing
    os.unlink(lp)
    assert_refused(sbx, d, "sha256:" + layer, "missing")
    open(lp, "wb").write(data)
    # an unknown media type
    m2 = json.loads(json.dumps(m))
    m2["layers"][0]["mediaType"] = "application/x-weird"
    _rewrite_manifest(d, m2)
    assert_refused(sbx, d, "application/x-weird")
    # a layer whose tar is not what the config says
    other = mkimage.layer([("x", b"y")])
    m3 = json.loads(json.dumps(m))
    m3["layers"][0].update(digest="sha256:" + mkimage.sha(other), size=len(other),
                           mediaType="application/vnd.oci.image.layer.v1.tar")
    open(os.path.join(d, "blobs", "sha256", mkimage.sha(other)), "wb").write(other)
    _rewrite_manifest(d, m3)
    assert_refused(sbx, d, "the config says")
    # not an image at all, and a truncated archive
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"\x00" * 100)
    assert_refused(sbx, str(junk))
    arch = str(tmp_path / "a.tar")
    mkimage.build_docker(arch, [(BB, [mkimage.busybox_layer()], None)])
    raw = open(arch, "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(raw[:len(raw) * 2 // 3])
    assert_refused(sbx, str(cut))
    # bad JSON in the index
    bad = _oci_files(tmp_path / "bad")
    open(os.path.join(bad, "index.json"), "w").write("{\"manifests\": 3}")
    assert_refused(sbx, bad, "manifests")
    assert sbx.ok("image", "import", good).split() == [BB]


@pytest.mark.idmap
def test_concurrent_imports_store_once(sbx, tmp_path, bb_docker):
    procs = [subprocess.Popen(sbx.cmd("image", "import", bb_docker), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert len(layers(sbx)) == 1
    assert list(listing(sbx)) == [BB]
    assert sh(sbx, "c", "echo ok", image=BB)["stdout"] == "ok\n"


@pytest.mark.idmap
def test_killed_import_leaves_nothing_visible(sbx, tmp_path):
    big = mkimage.layer([("big%d" % i, os.urandom(4 << 20)) for i in range(12)])
    out = str(tmp_path / "big.tar")
    mkimage.build_docker(out, [("big:1", [mkimage.busybox_layer(), big], None)])
    # how long a whole import takes here, in a home of its own: the kills land inside it
    from conftest import Sbx
    t = time.monotonic()
    Sbx(tmp_path / "timing").ok("image", "import", out)
    whole = time.monotonic() - t
    rnd = random.Random(1)
    killed = 0
    for i in range(6):
        p = subprocess.Popen(sbx.cmd("image", "import", out), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        time.sleep(rnd.uniform(0.0, 0.8) * whole)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if p.returncode == -signal.SIGKILL and "big:1" not in listing(sbx):
            killed += 1
        else:
            # it finished first, or the kill came after its tag was in (the commit point)
            # and before it exited: then the image is whole. Start again from nothing.
            assert p.returncode in (0, -signal.SIGKILL) and "big:1" in listing(sbx)
            assert sh(sbx, "k%d" % i, "wc -c < /big11", image="big:1")["stdout"].strip() == \
                str(4 << 20)
            sbx.ok("rm", "-t", "k%d" % i)
            sbx.ok("rmi", "big:1")
            sbx.ok("image", "prune")
    assert killed >= 3
    sbx.ok("image", "prune")
    assert os.listdir(os.path.join(store(sbx), "tmp")) == []
    sbx.ok("image", "import", out)
    assert "big:1" in listing(sbx)
    assert sh(sbx, "k", "wc -c < /big3", image="big:1")["stdout"].strip() == str(4 << 20)


@pytest.mark.idmap
def test_rmi_in_use_and_prune(sbx, bb_docker):
    sbx.ok("image", "import", bb_docker)
    sh(sbx, "u", "true", image=BB)
    p = sbx.run("rmi", BB)
    assert p.returncode == 1 and b"used by 1 sandbox" in p.stderr
    assert BB in listing(sbx)
    # prune keeps what is referenced
    sbx.ok("image", "prune")
    assert len(layers(sbx)) == 1 and len(blobs(sbx)) >= 3
    sbx.ok("rmi", "--force", BB)
    assert listing(sbx) == {}
    # the sandbox still has its layers mounted: prune keeps them
    sbx.ok("image", "prune")
    assert len(layers(sbx)) == 1
    assert sh(sbx, "u", "echo still")["stdout"] == "still\n"
    sbx.ok("rm", "-t", "u")
    out = sbx.ok("image", "prune")
    assert layers(sbx) == [] and blobs(sbx) == [], out
    p = sbx.run("rmi", "nope:1")
    assert p.returncode == 1 and b"not in the store" in p.stderr
    p = sbx.run("exec", "-t", "z", "--image", "nope:1", "--", "true")
    assert p.returncode == 1 and b"not in the store" in p.stderr


@pytest.mark.idmap
def test_image_without_shell(sbx, tmp_path):
    out = str(tmp_path / "nosh.tar")
    mkimage.build_docker(out, [("nosh:1", [mkimage.layer([("hello", b"hi\n")])], None)])
    sbx.ok("image", "import", out)
    p = sbx.run("exec", "-t", "n", "--image", "nosh:1", "--", "true")
    assert p.returncode == 127 and b"cannot execute /bin/sh" in p.stderr, p.stderr
    # file operations need no shell
    assert sbx.ok("read", "-t", "n", "/hello") == "hi\n"


def test_kernel_without_idmapped_overlay_layers_refused(sbx, bb_docker):
    """Below Linux 5.19 overlayfs refuses idmapped lower layers: the create is refused before
    anything is made, naming the kernel floor. SBX_TEST_NO_OVL_IDMAP stands for such a kernel;
    every other test here runs the real path."""
    sbx.ok("image", "import", bb_docker)
    old = _state_dirs(sbx.home)
    force = {"SBX_TEST_NO_OVL_IDMAP": "1"}
    p = sbx.run("exec", "-t", "k", "--image", BB, "--", "true", env=force)
    err = p.stderr.decode()
    assert p.returncode != 0 and "idmapped lower layers (Linux 5.19" in err and BB in err, err
    assert _state_dirs(sbx.home) == old
    assert listing(sbx)[BB]["in_use"] == 0
    # host sandboxes are unaffected; doctor says why images are not
    assert sbx.ok("exec", "-t", "k", "--", "echo", "host", env=force) == "host\n"
    doc = sbx.run("doctor", env=force).stdout.decode()
    assert "overlayfs with idmapped lower layers unavailable" in doc, doc
    assert "overlayfs with idmapped lower layers available" in sbx.run("doctor").stdout.decode()


def test_store_on_tmpfs(make_sbx, tmp_path, bb_docker):
    """An image's layers are idmapped onto the sandbox's range: a store on tmpfs works from
    Linux 6.3 (tmpfs idmaps); before, the create is refused naming the idmapped mount."""
    home = tmp_path / "tmpfs-home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(home)], check=True)
    try:
        s = make_sbx(home=home)
        s.ok("image", "import", bb_docker)
        p = s.run("exec", "-t", "t", "--image", BB, "--", "echo", "ran")
        if idmap_blocker(home):
            err = p.stderr.decode()
            assert p.returncode != 0 and "idmapped mount of layer" in err, err
            assert "a file system that supports idmapped mounts" in err, err
            assert s.ps() == [] and listing(s)[BB]["in_use"] == 0
        else:
            assert p.returncode == 0 and p.stdout == b"ran\n", p.stderr
        s.down()
    finally:
        subprocess.run(["umount", "-l", str(home)])


@pytest.mark.idmap
def test_mountinfo_shows_no_host_path(sbx, bb_docker):
    """The overlay's options (lowerdir, upperdir, workdir) appear in the sandbox's mountinfo:
    they are relative to the state folder, so $SBX_HOME and the store's paths do not. (The
    thread folder's bind shows its path inside its file system: docs/security.md.)"""
    sbx.ok("image", "import", bb_docker)
    r = sh(sbx, "m", "cat /proc/self/mountinfo", image=BB)
    assert r["exit_code"] == 0, r
    root = [line for line in r["stdout"].splitlines() if " / / " in line]
    assert root and " - overlay " in root[0] and "lowerdir=l/0:" in root[0], r["stdout"]
    assert sbx.home not in root[0] and "sandboxes/" not in root[0], root[0]
    assert "images/" not in r["stdout"] and "/sandboxes/" not in r["stdout"], r["stdout"]


def test_help_lists_verbs(sbx):
    out = sbx.ok("--help")
    for v in ("image", "images", "rmi"):
        assert "\n  %s " % v in out
    assert "import" in sbx.ok("image", "import", "--help")


# ---- escape: hostile layers (attacker-made tars), each refused with the entry named ----

def _hostile(sbx, tmp_path, name, entries, *words, extra=()):
    out = str(tmp_path / (name + ".tar"))
    mkimage.build_oci(out, [(name + ":1", [mkimage.layer(entries)], "gzip")])
    before = (blobs(sbx), layers(sbx))
    p = sbx.run("image", "import", *extra, out)
    assert p.returncode == 1, (name, p.stdout, p.stderr)
    for w in words:
        assert w.encode() in p.stderr, (name, w, p.stderr)
    assert name + ":1" not in listing(sbx)
    assert (blobs(sbx), layers(sbx)) == before


def test_hostile_layers(sbx, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    # positive control: the same machinery stores a benign layer with a symlink to outside
    ok = str(tmp_path / "ok.tar")
    mkimage.build_oci(ok, [("ok:1", [mkimage.layer([("s", ("link", str(outside))),
                                                   ("h", ("hard", "s"))])], None)])
    sbx.ok("image", "import", ok)
    lay = os.path.join(store(sbx), "layers", layers(sbx)[0])
    assert os.readlink(os.path.join(lay, "s")) == str(outside)
    assert os.path.islink(os.path.join(lay, "h"))  # the link itself, never what it names

    _hostile(sbx, tmp_path, "dotdot", [("a/../../../escape", b"x")], "`a/../../../escape`", "..")
    _hostile(sbx, tmp_path, "abs", [(str(outside / "abs"), b"x")], "absolute")
    _hostile(sbx, tmp_path, "symwrite", [("evil", ("link", str(outside))), ("evil/file", b"x")],
             "`evil/file`", "symlink")
    _hostile(sbx, tmp_path, "symrel", [("evil", ("link", "../../../../../../" + str(outside))),
                                       ("evil/file", b"x")], "`evil/file`")
    _hostile(sbx, tmp_path, "hardhost", [("h", ("hard", "/etc/passwd"))], "`h`")
    _hostile(sbx, tmp_path, "hardup", [("h", ("hard", "../../../../../../etc/passwd"))], "`h`")
    _hostile(sbx, tmp_path, "hardsym", [("s", ("link", "/etc")), ("h", ("hard", "s/passwd"))],
             "`h`")
    _hostile(sbx, tmp_path, "device", [("dev", "dir"), ("dev/sda", ("dev", 8, 0))],
             "`dev/sda`", "device")
    ti = tarfile.TarInfo("x")
    ti.pax_headers = {"SCHILY.xattr.trusted.overlay.redirect": "/etc"}
    ti.size = 1
    _hostile(sbx, tmp_path, "xattr", [("x", ti)], "trusted.overlay.redirect")
    # a decompression bomb: 256 MiB of zeros, a few hundred KB gzipped, over a 64 MiB cap
    bomb = tarfile.TarInfo("zeros")
    bomb.size = 256 << 20
    _hostile(sbx, tmp_path, "bomb", [("zeros", bomb)], "exceeds", extra=("--max-size", "64"))
    _hostile(sbx, tmp_path, "many", [("f%d" % i, b"") for i in range(50)], "entries",
             extra=("--max-entries", "20"))
    assert os.listdir(outside) == []
    assert not os.path.exists("/escape")


from test_sbxd_http import sbxd  # noqa: E402,F401  (the fixture)


@pytest.mark.idmap
def test_sbxd_image_uri(sbxd, tmp_path, bb_docker):
    from conftest import Sbx
    home = tmp_path / "home"
    Sbx(home).ok("image", "import", bb_docker)
    s = sbxd(home=home)
    sb = s.create(image={"uri": BB}, entrypoint=["sleep", "1000"])
    out, last = sb.run("busybox | head -1; echo $IMAGE_VAR")
    assert out, last
    assert "BusyBox" in out[0] and out[1].strip() == "from-image", out
    info = s.req("GET", "/v1/sandboxes/%s" % sb.id).json()
    assert info["image"] == {"uri": BB}
    r = s.req("POST", "/v1/sandboxes", {"image": {"uri": "nope:1"}, "entrypoint": ["true"],
                                        "resourceLimits": {"cpu": "1", "memory": "1Gi"},
                                        "timeout": 600})
    assert r.status == 400 and "sbx image import" in r.error()[1]
    assert s.req("DELETE", "/v1/sandboxes/%s" % sb.id).status == 204


def _spare_pids(home):
    d = os.path.join(home, "spare", "sandboxes")
    pids = set()
    for i in os.listdir(d) if os.path.isdir(d) else []:
        try:
            m = json.load(open(os.path.join(d, i, "meta")))
        except (OSError, ValueError):
            continue
        if m.get("pid"):
            pids.add(m["pid"])
    return pids


@pytest.mark.idmap
def test_spares_are_per_image(make_sbx, tmp_path, bb_docker):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image: busybox:test\n  spares: 1\n")
    s = make_sbx(config=str(cfg))
    s.ok("image", "import", bb_docker)
    sh(s, "first", "true")
    deadline = time.time() + 30
    while not _spare_pids(s.home) and time.time() < deadline:
        time.sleep(0.2)
    spares = _spare_pids(s.home)
    assert spares
    # a sandbox of another image does not take it
    r = sh(s, "host", "grep -c ^user: /etc/passwd; test -d /usr/lib; echo $?", image="host")
    assert r["stdout"] == "0\n0\n", r
    pid = {i["thread"]: i["pid"] for i in s.ps()}
    assert pid["host"] not in spares
    # one of its image does, and gets a writable root, its own name and the image's Env
    r = sh(s, "mine", "echo x > /y && cat /y && cat /etc/hostname && echo $IMAGE_VAR")
    out = r["stdout"].split("\n")
    pid = {i["thread"]: i["pid"] for i in s.ps()}
    assert pid["mine"] in spares
    mine = [i for i in s.ps() if i["thread"] == "mine"][0]["id"]
    assert out[:3] == ["x", "sbx-" + mine, "from-image"], out
    s.down()


def _wheel(path):
    """A minimal pure-Python wheel (a zip with its dist-info), made here."""
    import base64
    import hashlib
    import zipfile
    files = {"sbxdemo/__init__.py": b"ANSWER = 42\n",
             "sbxdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxdemo\nVersion: 1.0\n",
             "sbxdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sbx-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for n, d in files.items():
        dg = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (n, dg, len(d))
    record += "sbxdemo-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("sbxdemo-1.0.dist-info/RECORD", record)


def test_debian_python_pip_install(sbx, tmp_path):
    """A real distribution image: Debian 12 minbase with python3 and pip (debootstrap, cached)."""
    import debian
    try:
        root = debian.rootfs()
    except Exception as e:  # offline, or no debootstrap: nothing to test against
        pytest.skip("no Debian image (%s)" % e)
    out = str(tmp_path / "debian.tar")
    debian.pack(root, out)
    assert sbx.ok("image", "import", out).split() == ["debian-py:12"]
    ud = os.path.join(sbx.home, "users", "default", "threads", "py", "user-data", "workspace")
    r = sh(sbx, "py", "grep PRETTY /etc/os-release; id -un", image="debian-py:12")
    assert "Debian GNU/Linux 12" in r["stdout"] and r["stdout"].endswith("root\n"), r
    _wheel(os.path.join(ud, "sbxdemo-1.0-py3-none-any.whl"))
    r = sh(sbx, "py", "pip install --no-index --break-system-packages ./sbxdemo-1.0-py3-none-any.whl"
           " >/dev/null && python3 -c 'import sbxdemo; print(sbxdemo.ANSWER)'")
    assert r["exit_code"] == 0 and r["stdout"] == "42\n", r
    sbx.ok("release", "-t", "py")
    r = sh(sbx, "py", "python3 -c 'import sbxdemo; print(sbxdemo.ANSWER)'")
    assert r["stdout"] == "42\n", r
    sbx.ok("rm", "-t", "py")
    r = sh(sbx, "py", "python3 -c 'import sbxdemo' 2>/dev/null; echo $?", image="debian-py:12")
    assert r["stdout"] == "1\n", r


@pytest.mark.idmap
def test_docker_archive_with_two_images_sharing_a_layer(sbx, tmp_path):
    bb = mkimage.busybox_layer()
    out = str(tmp_path / "two.tar")
    mkimage.build_docker(out, [("one:1", [bb, mkimage.layer([("which", b"one")])], None),
                               ("two:1", [bb, mkimage.layer([("which", b"two")])], None)])
    assert sorted(sbx.ok("image", "import", out).split()) == ["one:1", "two:1"]
    assert len(layers(sbx)) == 3
    assert sh(sbx, "a", "cat /which", image="one:1")["stdout"] == "one"
    assert sh(sbx, "b", "cat /which", image="two:1")["stdout"] == "two"
    p = sbx.run("image", "import", "--name", "x:1", out)
    assert p.returncode == 1 and b"--name" in p.stderr
    # by digest prefix
    dg = listing(sbx)["one:1"]["digest"][7:19]
    assert sh(sbx, "c", "cat /which", image=dg)["stdout"] == "one"


def _loops_of(path):
    """Loop devices whose backing file is under path (the kernel's view, not our bookkeeping).
    The kernel names it from the attaching process's mount namespace: where that mount is not
    reachable from ours, relative to its file system's root (a /tmp of its own, as in the qemu
    guest, shows /pytest-of-root/...), so a tail of path (its home's name is unique) matches."""
    parts = path.rstrip("/").split("/")
    tails = ["/".join([""] + parts[i:]) + "/" for i in range(1, len(parts))]
    found = []
    for b in os.listdir("/sys/block"):
        try:
            with open(os.path.join("/sys/block", b, "loop", "backing_file")) as f:
                backing = f.read().strip()
            if any(backing.startswith(t) for t in tails):
                found.append(b)
        except OSError:
            pass
    return found


def _backing_files():
    """Every loop device's backing file, for a failure's message."""
    found = {}
    for b in os.listdir("/sys/block"):
        try:
            with open(os.path.join("/sys/block", b, "loop", "backing_file")) as f:
                found[b] = f.read().strip()
        except OSError:
            pass
    return found


def _host_mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if path in l]


def _state_dirs(home):
    d = os.path.join(home, "sandboxes")
    return [os.path.join(d, i) for i in os.listdir(d)] if os.path.isdir(d) else []


@pytest.mark.idmap
def test_disk_cap_on_the_upper(make_sbx, tmp_path, bb_docker):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image: busybox:test\n  disk_mib: 32\n")
    s = make_sbx(config=str(cfg))
    s.ok("image", "import", bb_docker)
    # positive control: 8 MiB fits, and the root is the capped file system
    r = sh(s, "w", "dd if=/dev/zero of=/keep bs=1M count=8 2>&1 && sync && echo kept; "
           "stat -f -c '%b %S' /")
    assert r["exit_code"] == 0 and "kept" in r["stdout"], r
    blocks, bsize = r["stdout"].split("\n")[-2].split()
    assert int(blocks) * int(bsize) <= 32 << 20, r
    r = sh(s, "w", "dd if=/dev/zero of=/usr/big bs=1M count=64 2>&1; echo rc=$?; "
           "ls -l /keep")
    assert "No space left on device" in r["stdout"] and "rc=0" not in r["stdout"], r
    assert " 8388608 " in r["stdout"], r
    # the host's disk holds at most the cap; the host has nothing of it mounted
    (state,) = _state_dirs(s.home)
    img = os.path.join(state, "disk.img")
    assert os.stat(img).st_blocks * 512 <= (32 << 20) + (1 << 20)
    assert not os.path.exists(os.path.join(state, "upper"))
    assert _host_mounts_under(s.home) == []
    # what was written before the cap was hit survives release and the next command
    s.ok("release", "-t", "w")
    r = sh(s, "w", "rm /usr/big; wc -c < /keep; echo more > /more && cat /more")
    assert r["stdout"] == "8388608\nmore\n", r
    assert _loops_of(s.home), ("the sandbox's upper is on a loop device", _backing_files())
    s.ok("rm", "-t", "w")
    deadline = time.time() + 10
    while (_loops_of(s.home) or os.path.exists(state)) and time.time() < deadline:
        time.sleep(0.1)
    assert _loops_of(s.home) == [] and not os.path.exists(state)
    assert _host_mounts_under(s.home) == []
    # a new sandbox of the thread starts from the image again, capped again
    assert sh(s, "w", "test -e /keep; echo $?")["stdout"] == "1\n"


@pytest.mark.idmap
def test_disk_cap_with_spares(make_sbx, tmp_path, bb_docker):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image: busybox:test\n  spares: 1\n  disk_mib: 16\n")
    s = make_sbx(config=str(cfg))
    s.ok("image", "import", bb_docker)
    sh(s, "first", "true")
    deadline = time.time() + 30
    while not _spare_pids(s.home) and time.time() < deadline:
        time.sleep(0.2)
    spares = _spare_pids(s.home)
    assert spares
    r = sh(s, "mine", "echo x > /y && cat /y; dd if=/dev/zero of=/big bs=1M count=32 2>&1; "
           "echo rc=$?")
    assert {i["thread"]: i["pid"] for i in s.ps()}["mine"] in spares
    assert r["stdout"].startswith("x\n") and "No space left on device" in r["stdout"], r
    s.down()
    deadline = time.time() + 10
    while _loops_of(s.home) and time.time() < deadline:
        time.sleep(0.1)
    assert _loops_of(s.home) == [] and _host_mounts_under(s.home) == []


@pytest.mark.idmap
def test_uncapped_spare_not_taken_by_capped_config(make_sbx, tmp_path, bb_docker):
    plain = tmp_path / "plain.yaml"
    plain.write_text("sandbox:\n  image: busybox:test\n  spares: 1\n")
    s = make_sbx(config=str(plain))
    s.ok("image", "import", bb_docker)
    sh(s, "first", "true")
    deadline = time.time() + 30
    while not _spare_pids(s.home) and time.time() < deadline:
        time.sleep(0.2)
    spares = _spare_pids(s.home)
    assert spares
    capped = tmp_path / "capped.yaml"
    capped.write_text("sandbox:\n  image: busybox:test\n  spares: 1\n  disk_mib: 16\n")
    c = make_sbx(home=s.home, config=str(capped))
    r = sh(c, "mine", "dd if=/dev/zero of=/big bs=1M count=32 2>&1; echo rc=$?")
    assert "No space left on device" in r["stdout"], r
    assert {i["thread"]: i["pid"] for i in c.ps()}["mine"] not in spares
