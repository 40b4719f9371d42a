"""The image store on the host (docs/security.md, "Image store"; docs/images.md, "Where"):

- A setuid-root program stays an image's business. Layers keep owners and modes, so an image's
  setuid-root file (imported, pulled, or made by root inside a sandbox and committed) is a host
  uid 0 setuid file under images/layers/. The store folder is 0700 whatever the home's mode, a
  home other users may write is refused, and `sbx doctor` says which. Each test puts the home in
  an open folder (0755 all the way, as `make run`'s .sbx in a checkout), has an ordinary user
  (nobody) try to run the stored file, and shows with a positive control that the same file is
  a root shell for that user once the store folder is open (the layout before the fix).
- A budget for the whole image, not per layer: an image of many layers, each under the
  per-layer cap, of zeros that compress to nothing, is refused with nothing left behind; zeros
  are stored as holes; a file system under the free space reserve refuses an import."""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import sbxsec
from sbxsec import SOURCE, Sbx

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the store of root is the one at stake")

ID = "/usr/bin/id"  # a dynamically linked host program: setuid, it prints euid=0(root)


def _pull_module():
    """tests/integration/test_pull.py (its loopback registry), with the integration conftest
    as the `conftest` it imports."""
    saved = sys.modules.get("conftest")
    sys.modules["conftest"] = sbxsec._integ
    integ = os.path.join(SOURCE, "tests", "integration")
    sys.path.insert(0, integ)  # for the modules it imports (test_sbxd_http)
    try:
        spec = importlib.util.spec_from_file_location(
            "sbx_test_pull", os.path.join(SOURCE, "tests", "integration", "test_pull.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(integ)
        if saved is None:
            del sys.modules["conftest"]
        else:
            sys.modules["conftest"] = saved


def _public_dir():
    d = tempfile.mkdtemp(prefix="sbx-store-", dir="/tmp")
    os.chmod(d, 0o755)
    return d


@pytest.fixture
def open_home():
    """An Sbx whose home is 0755 in a folder every user may traverse."""
    d = _public_dir()
    home = os.path.join(d, "home")
    os.mkdir(home, 0o755)
    os.chmod(home, 0o755)
    s = Sbx(home)
    yield s
    try:
        s.down()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", d], check=False)


def _as_nobody(path):
    """nobody runs path from a shell, as any local account would (the shell, not a privileged
    helper, resolves the path)."""
    return subprocess.run(["/bin/sh", "-c", 'exec "$0"', path], user=65534, group=65534,
                          extra_groups=[], capture_output=True, timeout=30)


def _suid_layer():
    return mkimage.layer([("suid-id", ("mode", open(ID, "rb").read(), 0o4755))])


def _stored(home, name="suid-id"):
    (path,) = glob.glob(os.path.join(home, "images", "layers", "*", name))
    st = os.stat(path)
    # the attack's material is there: a host setuid file of uid 0
    assert st.st_uid == 0 and st.st_mode & 0o4000, oct(st.st_mode)
    return path


def _unreachable_then_control(home, path):
    """nobody cannot run the stored file; with the store folder opened as it was before the
    fix, the same file gives nobody euid 0 (the positive control), and the next use of the
    store closes it again."""
    images = os.path.join(home, "images")
    assert os.stat(images).st_mode & 0o7777 == 0o700
    assert os.stat(home).st_mode & 0o777 == 0o755  # the home stayed open: only the store is not
    p = _as_nobody(path)
    assert p.returncode != 0 and b"Permission denied" in p.stderr, p
    os.chmod(images, 0o755)
    try:
        p = _as_nobody(path)
        assert p.returncode == 0 and b"euid=0(root)" in p.stdout, p
    finally:
        os.chmod(images, 0o700)


def test_imported_setuid_root_file_is_out_of_reach(open_home, tmp_path):
    s = open_home
    img = str(tmp_path / "suid.tar")
    mkimage.build_docker(img, [("suid:1", [_suid_layer()], None)])
    s.ok("image", "import", img)
    path = _stored(s.home)
    _unreachable_then_control(s.home, path)
    # a store left open (made before the fix) is closed by the next write, with a warning
    os.chmod(os.path.join(s.home, "images"), 0o755)
    p = s.run("doctor")
    assert b"image store" in p.stdout and b"is mode 0755" in p.stdout, p.stdout
    img2 = str(tmp_path / "other.tar")
    mkimage.build_docker(img2, [("other:1", [mkimage.layer([("x", b"x\n")])], None)])
    p = s.run("image", "import", img2, check=0)
    assert b"made 0700" in p.stderr, p.stderr
    assert os.stat(os.path.join(s.home, "images")).st_mode & 0o7777 == 0o700
    assert _as_nobody(path).returncode != 0
    p = s.run("doctor")
    assert b"is private (mode 0700)" in p.stdout, p.stdout


def test_pulled_setuid_root_file_is_out_of_reach(open_home, tmp_path):
    tp = _pull_module()
    reg = tp.Registry(tmp_path)
    try:
        lay = str(tmp_path / "lay")
        mkimage.build_oci(lay, [("suid", [_suid_layer()], "gzip")], as_dir=True)
        reg.push(lay, "test/suid:1")
        s = open_home
        s.ok("pull", reg.host + "/test/suid:1")
    finally:
        reg.stop()
    _unreachable_then_control(s.home, _stored(s.home))


def _idmap_or_skip(path):
    """The sandboxes here mount the store's layers idmapped (not on tmpfs before Linux 6.3)."""
    why = sbxsec._integ.idmap_blocker(str(path))
    if why:
        pytest.skip(why)


def test_committed_setuid_root_file_is_out_of_reach(open_home, tmp_path):
    """root inside a sandbox makes the setuid file; `sbx commit` (and sbxd's snapshot API,
    which is the same sbx_commit) stores it as the image's root's, host uid 0."""
    s = open_home
    _idmap_or_skip(s.home)
    img = str(tmp_path / "bb.tar")
    lay = mkimage.layer([("host-id", ("mode", open(ID, "rb").read(), 0o755))])
    mkimage.build_docker(img, [("bb:1", [mkimage.busybox_layer(), lay], None)])
    s.ok("image", "import", img)
    t = sbxsec.new_thread("store")
    # setuid bits can be set in a scope's sandbox only where host root's files stay unmapped in
    # its thread folder (docs/security.md, the setid guard)
    with open(os.path.join(s.home, "config.yaml"), "w") as f:
        f.write("sandbox:\n  map_host_root: false\n")
    p = s.run("exec", "-t", t, "--image", "bb:1", "--", "chmod 4755 /host-id && stat -c %a /host-id")
    assert p.returncode == 0 and p.stdout == b"4755\n", p
    s.ok("commit", "-t", t, "made:1")
    (path,) = [f for f in glob.glob(os.path.join(s.home, "images", "layers", "*", "host-id"))
               if os.stat(f).st_mode & 0o4000]
    assert os.stat(path).st_uid == 0
    _unreachable_then_control(s.home, path)


def test_open_home_is_tightened_or_refused(tmp_path):
    d = _public_dir()
    try:
        img = str(tmp_path / "x.tar")
        mkimage.build_docker(img, [("x:1", [mkimage.layer([("x", b"x\n")])], None)])
        # others could rename images/ away and put theirs in its place: a home of ours that
        # they may write is made go-w, with a warning (a tmpfs mounted as the home is 1777)
        home = os.path.join(d, "home")
        os.mkdir(home)
        os.chmod(home, 0o1777)
        s = Sbx(home)
        p = s.run("doctor")
        assert b"[warn] image store" in p.stdout and b"is writable by other users" in p.stdout \
            and b"makes it go-w" in p.stdout, p.stdout
        p = s.run("image", "import", img, check=0)
        assert b"was mode 1777, writable by other users: made 1755" in p.stderr, p.stderr
        assert os.stat(home).st_mode & 0o7777 == 0o1755
        assert os.stat(os.path.join(home, "images")).st_mode & 0o7777 == 0o700
        # another user's home is refused, one line, nothing made
        other = os.path.join(d, "other")
        os.mkdir(other, 0o755)
        os.chown(other, 65534, 65534)
        s2 = Sbx(other)
        p = s2.run("image", "import", img, check=1)
        assert b"belongs to another user" in p.stderr and p.stderr.count(b"\n") == 1, p.stderr
        assert not os.path.exists(os.path.join(other, "images"))
        p = s2.run("doctor")
        assert b"imports, pulls and commits are refused" in p.stdout, p.stdout
    finally:
        shutil.rmtree(d)


# ---- the whole image's budget ----

MIB = 1 << 20


def _zeros_layer(i, mib):
    return mkimage.layer([("zeros-%d" % i, b"\0" * (mib * MIB)), ("tail-%d" % i, b"x\n")])


def _left(home):
    """What an import left in the store: layers, blobs, work folders, names."""
    st = os.path.join(home, "images")
    out = []
    for sub in ("layers", "blobs/sha256", "tmp"):
        d = os.path.join(st, sub)
        if os.path.isdir(d):
            out += [sub + "/" + n for n in os.listdir(d) if n != "pull-cache"]
    cache = os.path.join(st, "tmp", "pull-cache")
    if os.path.isdir(cache):
        out += ["pull-cache/" + n for n in os.listdir(cache) if not n.endswith(".lock")]
    return sorted(out)


def test_many_small_layers_over_the_image_budget(make_sbx, tmp_path):
    # five layers of 3 MiB of zeros (a few KiB each, gzipped), each under the per-layer cap
    img = str(tmp_path / "zeros.tar")
    mkimage.build_oci(img, [("zeros:1", [_zeros_layer(i, 3) for i in range(5)], "gzip")])
    assert os.path.getsize(img) < MIB
    # positive control: the per-layer cap alone (the budget before the fix) lets it in
    ok = make_sbx(image_layer_max_mib=4, image_max_mib=64)
    ok.ok("image", "import", img)
    # and its zeros are holes: 3 MiB files that take a few blocks
    for f in glob.glob(os.path.join(ok.home, "images", "layers", "*", "zeros-*")):
        st = os.stat(f)
        assert st.st_size == 3 * MIB and st.st_blocks * 512 <= 64 * 1024, (f, st.st_blocks)
    s = make_sbx(image_layer_max_mib=4, image_max_mib=8)
    p = s.run("image", "import", img, check=1)
    assert b"budget of 8 MiB (sandbox.image_max_mib)" in p.stderr, p.stderr
    assert p.stderr.count(b"\n") == 1, p.stderr
    assert _left(s.home) == [], _left(s.home)
    assert s.json("images", "--json")["images"] == []


def test_pulled_image_over_the_budget_leaves_nothing(make_sbx, tmp_path):
    tp = _pull_module()
    reg = tp.Registry(tmp_path)
    try:
        lay = str(tmp_path / "lay")
        mkimage.build_oci(lay, [("zeros", [_zeros_layer(i, 3) for i in range(5)], "gzip")],
                          as_dir=True)
        reg.push(lay, "test/zeros:1")
        s = make_sbx(image_layer_max_mib=4, image_max_mib=8)
        p = s.run("pull", reg.host + "/test/zeros:1", check=1)
        assert b"sandbox.image_max_mib" in p.stderr, p.stderr
        assert _left(s.home) == [], _left(s.home)
        assert s.json("images", "--json")["images"] == []
    finally:
        reg.stop()


def test_free_space_reserve_refuses_an_import(make_sbx, tmp_path):
    img = str(tmp_path / "small.tar")
    mkimage.build_docker(img, [("small:1", [mkimage.layer([("x", b"x" * 5000)])], None)])
    # a reserve larger than any disk: nothing is free enough
    s = make_sbx(image_min_free_mib=1 << 40)
    p = s.run("image", "import", img, check=1)
    assert b"under the reserve of" in p.stderr and b"sandbox.image_min_free_mib" in p.stderr, \
        p.stderr
    assert _left(s.home) == [], _left(s.home)
    # positive control: the ordinary reserve
    make_sbx().ok("image", "import", img)


def test_commit_counts_against_the_image_budget(make_sbx, tmp_path):
    """A commit's new layer is unpacked within the image's budget too (the sandbox's root wrote
    it: attacker input), and a refused commit leaves nothing."""
    img = str(tmp_path / "bb.tar")
    mkimage.build_docker(img, [("bb:1", [mkimage.busybox_layer()], None)])
    s = make_sbx(image_max_mib=4)
    _idmap_or_skip(s.home)
    s.ok("image", "import", img)
    before = _left(s.home)
    t = sbxsec.new_thread("budget")
    p = s.run("exec", "-t", t, "--image", "bb:1", "--", "dd if=/dev/zero of=/big bs=1M count=6")
    assert p.returncode == 0, p
    p = s.run("commit", "-t", t, "big:1", check=1)
    assert b"budget of 4 MiB (sandbox.image_max_mib)" in p.stderr, p.stderr
    assert _left(s.home) == before, _left(s.home)
    # positive control: 2 MiB fits
    s.ok("exec", "-t", t, "--image", "bb:1", "--", "rm /big && dd if=/dev/zero of=/small bs=1M count=2")
    s.ok("commit", "-t", t, "small:1")
