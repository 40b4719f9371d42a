"""Escapes through an image as an ordinary user (docs/hosts.md, "Rootless", Images): the user's
store is written by root of a user namespace of the user's (which holds capabilities over the
store slice's files), so a layer is attacker input to a privileged writer there too. A hostile
layer (absolute and `..` names, writes through a symlink it made, hard links out of the layer,
a device node, overlayfs xattrs, a setuid file) must not write outside the store nor give
anything the user lacks; an image's symlinked mount points stay inside its sandbox; the store
is the user's alone (0700). Each attempt targets a folder the user itself may write, so only
the mechanism stops it; the positive controls show the same requests work where they should."""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from sbxsec import SOURCE

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make the test users")


def _rootless():
    spec = importlib.util.spec_from_file_location(
        "sbx_test_rootless", os.path.join(SOURCE, "tests", "integration", "test_rootless.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rl = _rootless()
bindir = rl.bindir  # the fixtures: sbx and sbx-init where any user can run them
user = rl.user  # a user with subordinate ids


@pytest.fixture
def work(user):
    """A folder of the user's: what a broken check would let a layer write into."""
    d = rl._public_dir("sbx-sec-rl-")
    os.chown(d, user.uid, user.gid)
    out = os.path.join(d, "outside")
    os.mkdir(out)
    os.chown(out, user.uid, user.gid)
    yield d, out
    shutil.rmtree(d)


def _tar(d, name, layers):
    path = os.path.join(d, name + ".tar")
    mkimage.build_oci(path, [(name + ":1", layers, "gzip")])
    os.chmod(path, 0o644)
    return path


def _layers(user):
    d = os.path.join(user.state, "images", "layers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _hostile(user, d, name, entries, *words):
    before = _layers(user)
    p = user.run("image", "import", _tar(d, name, [mkimage.layer(entries)]))
    assert p.returncode == 1, (name, p.stdout, p.stderr)
    for w in words:
        assert w.encode() in p.stderr, (name, w, p.stderr)
    assert _layers(user) == before, name


def test_hostile_layers_stay_in_the_users_store(user, work):
    d, outside = work
    # positive control: the user can write there, and a benign layer with an absolute symlink
    # to it and a hard link to that symlink is stored as links, never followed
    user.run("exec", "-t", "ctl", "--", "true", check=0)
    p = subprocess.run(["setpriv", "--reuid=%d" % user.uid, "--regid=%d" % user.gid,
                        "--clear-groups", "touch", os.path.join(outside, "probe")])
    assert p.returncode == 0
    os.unlink(os.path.join(outside, "probe"))
    user.ok("image", "import", _tar(d, "ok", [mkimage.layer([
        ("s", ("link", outside)), ("h", ("hard", "s"))])]))
    (lay,) = [l for l in glob.glob(os.path.join(user.state, "images", "layers", "*"))
              if os.path.islink(os.path.join(l, "s"))]
    assert os.readlink(os.path.join(lay, "s")) == outside
    assert os.path.islink(os.path.join(lay, "h"))

    _hostile(user, d, "dotdot", [("a/../../../../escape", b"x")], "..")
    _hostile(user, d, "abs", [(os.path.join(outside, "abs"), b"x")], "absolute")
    _hostile(user, d, "symwrite", [("evil", ("link", outside)), ("evil/file", b"x")],
             "`evil/file`", "symlink")
    _hostile(user, d, "symrel", [("evil", ("link", "../../../../../../../.." + outside)),
                                 ("evil/file", b"x")], "`evil/file`")
    _hostile(user, d, "hardhost", [("h", ("hard", "/etc/passwd"))], "`h`")
    _hostile(user, d, "hardsym", [("s", ("link", "/etc")), ("h", ("hard", "s/passwd"))], "`h`")
    for key in ("trusted.overlay.redirect", "user.overlay.redirect", "user.overlay.opaque"):
        ti = tarfile.TarInfo("x")
        ti.pax_headers = {"SCHILY.xattr." + key: "/etc"}
        ti.size = 1
        _hostile(user, d, "xattr", [("x", ti)], key)
    assert os.listdir(outside) == []
    assert not os.path.exists("/escape")


def test_devices_and_setuid_give_nothing(user, work):
    d, outside = work
    # a device node (the host's disk) is skipped with a warning; a setuid root file is the
    # user's own on the host (root inside is the user), so running it gains nothing
    p = user.run("image", "import", _tar(d, "dev", [mkimage.layer([
        ("sda", ("dev", 8, 0)), ("null", ("dev", 1, 3)), ("suid", ("mode", b"#!x\n", 0o4755))])]))
    assert p.returncode == 0, p.stderr
    assert b"2 device nodes" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
    (lay,) = [l for l in glob.glob(os.path.join(user.state, "images", "layers", "*"))
              if os.path.exists(os.path.join(l, "suid"))]
    assert not os.path.exists(os.path.join(lay, "sda"))
    assert not os.path.exists(os.path.join(lay, "null"))
    st = os.stat(os.path.join(lay, "suid"))
    assert st.st_uid == user.uid and st.st_mode & 0o4000, oct(st.st_mode)
    for root, dirs, files in os.walk(os.path.join(user.state, "images")):
        for n in dirs + files:
            s = os.lstat(os.path.join(root, n))
            assert s.st_uid != 0 and s.st_gid != 0, os.path.join(root, n)
    # the store is the user's alone: another user reaches none of it
    st = os.stat(os.path.join(user.state, "images"))
    assert st.st_uid == user.uid and st.st_mode & 0o077 == 0, oct(st.st_mode)
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls",
                        os.path.join(user.state, "images", "layers")], capture_output=True)
    assert p.returncode != 0 and b"Permission denied" in p.stderr, p


def test_symlinked_mount_points_stay_inside(user, work):
    d, outside = work
    with open(os.path.join(outside, "keep"), "w") as f:
        f.write("host\n")
    os.chown(os.path.join(outside, "keep"), user.uid, user.gid)
    bb = mkimage.busybox_layer()
    # positive control: the plain image runs and writes where the links would point
    user.ok("image", "import", _tar(d, "control", [bb]))
    r = user.sh("c", "echo ok > /tmp/x && cat /tmp/x", image="control:1")
    assert r["stdout"] == "ok\n", r
    evil = mkimage.layer([(name, ("link", outside))
                          for name in ("proc", "dev", "sys", "tmp", "run", "mnt", "root")] +
                         [("etc/hosts", ("link", os.path.join(outside, "hosts"))),
                          ("etc/hostname", ("link", os.path.join(outside, "keep"))),
                          ("etc/passwd", ("link", os.path.join(outside, "keep")))])
    user.ok("image", "import", _tar(d, "evil", [bb, evil]))
    r = user.sh("e", "echo pwn > /tmp/x; echo pwn > /root/x; echo pwn > /run/x; "
                "cat /etc/hostname; grep -c ^root: /etc/passwd; test -d /proc/self && echo proc",
                image="evil:1")
    assert r["exit_code"] == 0, r
    assert r["stdout"].split("\n")[1:3] == ["1", "proc"], r
    assert sorted(os.listdir(outside)) == ["keep"]
    assert open(os.path.join(outside, "keep")).read() == "host\n"
    # root inside cannot change the shared layers
    (lay,) = [l for l in glob.glob(os.path.join(user.state, "images", "layers", "*"))
              if os.path.exists(os.path.join(l, "bin", "busybox"))]
    before = open(os.path.join(lay, "etc", "passwd"), "rb").read()
    user.sh("w", "echo pwn >> /etc/passwd; rm -f /bin/ls; chmod 777 /bin; "
            "mount -o remount,rw / 2>&1; true", image="control:1")
    assert open(os.path.join(lay, "etc", "passwd"), "rb").read() == before
    assert os.path.exists(os.path.join(lay, "bin", "ls"))
    assert os.stat(os.path.join(lay, "bin")).st_mode & 0o777 == 0o755
