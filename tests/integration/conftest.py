"""Fixtures for the integration tests: they drive the real binaries (build/sbx, build/sbx-init)
against a fresh state directory per test, as root, with real namespaces."""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import leakcheck  # noqa: E402  (tests/leakcheck.py)

SOURCE = os.environ.get("SBX_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SBX_BUILD") or os.path.join(SOURCE, "build")
SBX = os.path.join(BUILD, "sbx")
# no implicit pull from a real registry: a test expecting an image to be missing must not find
# it on Docker Hub (test_pull.py turns pulls back on for its loopback registries)
os.environ.setdefault("SBX_PULL", "never")
# SBX_TEST_SLOW=N: every time limit of the tests N times longer, for slow machines (the qemu
# guest under software emulation sets 5, tests/guest/suite.sh); what a limit asserts about sbx
# itself (a timeout sbx must enforce) stays as it is
SLOW = max(1.0, float(os.environ.get("SBX_TEST_SLOW") or 1))


def free_port():
    """A loopback TCP port nothing listens on now (a server started next takes it)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slow(seconds):
    """A test's own time limit, scaled by SBX_TEST_SLOW."""
    return seconds * SLOW


def idmap_blocker(path):
    """Why the file system holding path cannot be idmapped on this kernel (a skip reason), or
    None. What sbx idmaps there (an image's layers, a spare's or a rootless sandbox's thread
    folder) is refused or falls back by design, so a test of those paths cannot run."""
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                        text=True).stdout.strip()
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    if fs == "tmpfs" and m and (int(m.group(1)), int(m.group(2))) < (6, 3):
        return ("the tests' folders (%s) are on tmpfs, which cannot be idmapped before Linux 6.3 "
                "(this is %s): put them on a disk (pytest --basetemp, or the guest job's "
                "GUEST_DISK)" % (path, os.uname().release))
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "idmap: needs a tests' folder that can be idmapped "
                            "(skipped, naming why, where it cannot)")


_no_sandbox_outlives_the_test = leakcheck.no_sandbox_outlives_the_test  # autouse


@pytest.fixture(autouse=True)
def _idmap_required(request, tmp_path_factory):
    if request.node.get_closest_marker("idmap"):
        why = idmap_blocker(tmp_path_factory.getbasetemp())
        if why:
            pytest.skip(why)


def on_a_terminal(cmd):
    """cmd run by script(1) on a new terminal (its stdin, stdout and stderr), with script's exit
    status its own"""
    return ["script", "-qefc", " ".join(shlex.quote(str(c)) for c in cmd), "/dev/null"]


class Sbx:
    """Runs `sbx --home HOME ...` and keeps track of what the test created."""

    def __init__(self, home, config=None):
        self.home = str(home)
        self.config = config

    def cmd(self, *args):
        base = [SBX, "--home", self.home]
        if self.config:
            base += ["--config", self.config]
        return base + [str(a) for a in args]

    def run(self, *args, input=None, timeout=60, check=None, env=None, tty=False):
        """Runs sbx; returns CompletedProcess (stdout/stderr as bytes). tty: on a terminal of
        its own (script(1)), for `--tty`, which refuses a stdin that is not one; what sbx
        writes, stderr included, is then the terminal's output, in stdout."""
        e = dict(os.environ)
        if env:
            e.update(env)
        if isinstance(input, str):
            input = input.encode()
        cmd = on_a_terminal(self.cmd(*args)) if tty else self.cmd(*args)
        p = subprocess.run(cmd, input=input if input is not None else b"",
                           capture_output=True, timeout=slow(timeout), env=e)
        if check is not None:
            assert p.returncode == check, (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        return p

    def ok(self, *args, **kw):
        return self.run(*args, check=0, **kw).stdout.decode()

    def json(self, *args, **kw):
        return json.loads(self.run(*args, check=kw.pop("check", 0), **kw).stdout)

    def sh(self, thread, command, user=None, **kw):
        """`sbx exec --json` of command in thread's sandbox; returns the JSON result."""
        args = ["exec", "-t", thread] + (["-u", user] if user else []) + ["--json", "--", command]
        p = self.run(*args, **kw)
        assert p.stdout, p.stderr
        return json.loads(p.stdout)

    def ps(self):
        return self.json("ps", "--json")["sandboxes"]

    def down(self):
        self.run("down", timeout=120)


# SBX_TEST_IMAGE=NAME: the `sbx` fixture's sandboxes come from an OCI image instead of `host`
# (sandbox.image: NAME), built by tests/images/mkimage.py --sdk and imported into each home:
# ctest's integration/image runs the DeerFlow tool-path suites (test_files.py) so.
TEST_IMAGE = os.environ.get("SBX_TEST_IMAGE")


@pytest.fixture(scope="session")
def test_image_archive(tmp_path_factory):
    sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
    import mkimage
    out = str(tmp_path_factory.mktemp("image") / "image.tar")
    mkimage.build_docker(out, [(TEST_IMAGE, [mkimage.busybox_layer(), mkimage.sdk_layer()], None)])
    return out


@pytest.fixture
def sbx(tmp_path, request):
    home = tmp_path / "home"
    if TEST_IMAGE:
        cfg = tmp_path / "image-config.yaml"
        cfg.write_text("sandbox:\n  image: %s\n" % TEST_IMAGE)
        s = Sbx(home, str(cfg))
        assert s.ok("image", "import", request.getfixturevalue("test_image_archive")).split() == [
            TEST_IMAGE]
    else:
        s = Sbx(home)
    yield s
    s.down()


@pytest.fixture
def make_sbx(tmp_path):
    """A factory for Sbx objects sharing nothing (or a given home/config)."""
    made = []

    def factory(home=None, config=None):
        h = home or (tmp_path / ("home-" + uuid.uuid4().hex[:8]))
        s = Sbx(h, config)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.down()


def alive(pid):
    """A live process (a zombie waiting for the host's init to reap it is dead)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def thread_dir(sbx, thread, user="default"):
    return os.path.join(sbx.home, "users", user, "threads", thread, "user-data")
