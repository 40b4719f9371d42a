"""Fixtures of the security suite. Every test drives the real `sbx` CLI (from $SBX_BUILD, else
./build) against a state directory of its own, as root, with real namespaces; a test fails if
the attempt it makes succeeds.

This module re-exports the integration suite's names (Sbx, thread_dir): when both suites are
collected in one run, `from conftest import ...` in either resolves to this module or to theirs."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import leakcheck  # noqa: E402  (tests/leakcheck.py)

import sbxsec
from sbxsec import BUILD, SBX, SOURCE, Sbx, thread_dir  # noqa: F401  (re-exported, see above)


def pytest_collection_modifyitems(config, items):
    if not os.path.exists(SBX):
        skip = pytest.mark.skip(reason="%s is not built" % SBX)
        for item in items:
            item.add_marker(skip)


def _cleanup(s):
    try:
        s.down()
    finally:
        # a test may leave trees deeper than Python's recursion limit: GNU rm copes
        subprocess.run(["rm", "-rf", "--one-file-system", s.home], check=False)


_no_sandbox_outlives_the_test = leakcheck.no_sandbox_outlives_the_test  # autouse


@pytest.fixture
def sbx(tmp_path):
    s = Sbx(tmp_path / "home")
    yield s
    _cleanup(s)


@pytest.fixture
def make_sbx(tmp_path):
    """A factory for Sbx objects with their own home, optionally with a configuration given as
    sandbox keys (make_sbx(memory_mib=256, pids=128))."""
    made = []

    def factory(**sandbox):
        n = len(made)
        home = tmp_path / ("home-%d" % n)
        home.mkdir()
        cfg = sbxsec.write_config(tmp_path / ("config-%d.yaml" % n), **sandbox) if sandbox else None
        s = Sbx(home, cfg)
        made.append(s)
        return s

    yield factory
    for s in made:
        _cleanup(s)


@pytest.fixture
def thread():
    return sbxsec.new_thread()


@pytest.fixture(scope="session")
def probe_bin(tmp_path_factory):
    """tests/security/probe.c, linked statically so that it runs in any sandbox image."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the probe")
    out = tmp_path_factory.mktemp("probe") / "probe"
    src = os.path.join(sbxsec.HERE, "probe.c")
    subprocess.run([gcc, "-static", "-O1", "-o", str(out), src], check=True)
    return str(out)


@pytest.fixture
def prober(sbx, probe_bin):
    return sbxsec.Prober(sbx, probe_bin)


@pytest.fixture
def host_secret(tmp_path):
    """Secret files in host places a sandbox must never see: /root, /tmp, /var/tmp, /home and
    the test's own folder (which holds the state directory)."""
    marker = "TOPSECRET-HOST-%d" % os.getpid()
    paths = []
    for d in ["/root", "/tmp", "/var/tmp", "/home", str(tmp_path)]:
        if not os.path.isdir(d):
            continue
        p = os.path.join(d, "sbx-sec-secret-%d.txt" % os.getpid())
        with open(p, "w") as f:
            f.write(marker + "\n")
        paths.append(p)
    yield marker, paths
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass
