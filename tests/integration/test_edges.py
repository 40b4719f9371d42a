"""Small sharp edges a new user hit (issue 35, item 11), each through the face the user used:
usage errors and their exit status, option-looking scope names, `sbx net`'s message, sbxd's
listen address and one sbxd a home, a create whose entrypoint fails, an exec whose pull fails,
and `sbx image prune`'s count of what it freed."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import SBX, SOURCE, slow
from test_sbxd_http import SBXD, sbxd  # noqa: F401 (a fixture)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=slow(60), stdin=subprocess.DEVNULL, **kw)


@pytest.mark.parametrize("args,says", [
    (["exec", "-t", "-rf", "--", "true"], "invalid thread '-rf': a thread id does not start with '-'"),
    (["exec", "-t", "x", "-u", "-u", "--", "true"], "invalid user '-u'"),
    (["exec", "-t", "bad thread", "--", "true"], "Invalid thread_id"),
    (["exec", "-t", "x", "-u", "b c", "--", "true"], "Invalid user_id"),
    (["rm", "-t", "bad!"], "Invalid thread_id"),
    (["shell", "-t", "-x"], "invalid thread '-x'"),
    (["net", "-t", "x y", "show"], "Invalid thread_id"),
    (["mcp", "-t", "-rf"], "invalid thread '-rf'"),
    (["net", "-t", "x"], "missing the command (show, allow, deny, rm or log)"),
])
def test_usage_errors_exit_2_and_change_nothing(tmp_path, args, says):
    home = tmp_path / "home"
    p = run([SBX, "--home", str(home)] + args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert says in p.stderr, p.stderr
    if args[0] == "net":
        assert "COMMAND" not in p.stderr and "--" not in p.stderr.split("\n")[0], p.stderr
    assert not os.path.exists(home / "users"), "a refused scope made a thread folder"


def test_a_thread_named_like_an_option_makes_nothing(sbx):
    p = sbx.run("exec", "-t", "-rf", "--", "touch /mnt/user-data/workspace/x")
    assert p.returncode == 2
    assert not os.path.exists(os.path.join(sbx.home, "users", "default", "threads", "-rf"))
    assert sbx.ps() == []
    assert sbx.ok("exec", "-t", "ok-thread", "--", "echo fine") == "fine\n"  # a good name works


def test_sbxd_usage_errors_exit_2(tmp_path):
    for args, says in [(["--listen", "127.0.0.1:abc"], "invalid listen address '127.0.0.1:abc'"),
                       (["--listen", "nohost"], "invalid listen address 'nohost'"),
                       (["--bogus"], "bad option '--bogus'"),
                       (["extra"], "unexpected argument 'extra'"),
                       (["--listen", "10.1.2.3:0"], "refusing to listen on 10.1.2.3:0 without an API key")]:
        p = run([SBXD, "--home", str(tmp_path / "h")] + args)
        assert p.returncode == 2 and says in p.stderr, (args, p.returncode, p.stderr)


def test_sbxd_listens_on_localhost_as_loopback(tmp_path):
    env = dict(os.environ)
    env.pop("OPEN_SANDBOX_API_KEY", None)
    for listen in ("localhost:0", "LocalHost:0"):
        p = subprocess.Popen([SBXD, "--listen", listen, "--home", str(tmp_path / "home")],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            line = {}
            for raw in p.stderr:
                line = json.loads(raw)
                if line.get("msg") in ("listening",) or line.get("level") == "error":
                    break
            assert line.get("msg") == "listening", line
            assert line["address"].startswith("127.0.0.1:") and line["auth"] is False
        finally:
            p.send_signal(signal.SIGTERM)
            assert p.wait(slow(60)) == 0


def test_a_second_sbxd_on_a_home_is_refused(sbxd, tmp_path):  # noqa: F811
    s = sbxd(api_key=None)
    p = run([SBXD, "--listen", "127.0.0.1:0", "--home", s.home])
    assert p.returncode == 1, p.stderr
    assert "another sbxd (pid %d) serves the home `%s`" % (s.proc.pid, s.home) in p.stderr, p.stderr
    # the first one is unharmed and keeps serving
    assert s.req("GET", "/health", key=None).status == 200
    # once it is gone (kill -9 too), the home is free again
    s.kill9()
    s2 = sbxd(api_key=None, home=s.home)
    assert s2.req("GET", "/health", key=None).status == 200


def disk_usage(top):
    """(bytes counted once an inode, as du does; bytes counted once a name)."""
    seen, once, per_name = set(), 0, 0
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            b = st.st_blocks * 512
            per_name += b
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                once += b
    return once, per_name


def test_image_prune_counts_hard_links_once(sbx, tmp_path):
    sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
    import mkimage
    archive = str(tmp_path / "bb.tar")
    mkimage.build_docker(archive, [("bb:prune", [mkimage.busybox_layer()], None)])
    sbx.ok("image", "import", archive)
    store = os.path.join(sbx.home, "images")
    once, per_name = disk_usage(store)
    # the positive control: busybox's applets are hard links of one file, so counting names
    # (what prune did) gives many times the store's size
    assert per_name > 3 * once, (once, per_name)
    sbx.ok("rmi", "bb:prune")
    out = sbx.ok("image", "prune")
    m = re.search(r"freed ([0-9.]+) MB", out)
    assert m, out
    freed = float(m.group(1)) * 1e6
    assert 0 < freed <= once + 0.05e6, (out, once, per_name)
    assert freed >= (once - disk_usage(store)[0]) * 0.9 - 0.05e6, (out, once)  # what went, counted


def test_an_exec_whose_pull_fails_leaves_no_thread_folder(sbx):
    threads = os.path.join(sbx.home, "users", "default", "threads")
    # nothing listens on loopback port 1: the pull fails at once
    p = sbx.run("exec", "-t", "pullfail", "--image", "127.0.0.1:1/nope:1", "--", "true",
                env={"SBX_PULL": "missing"})
    assert p.returncode == 1 and b"pulling it failed" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(threads, "pullfail"))
    p = sbx.run("exec", "-t", "notstored", "--image", "nope:1", "--", "true")  # SBX_PULL=never
    assert p.returncode == 1 and b"not in the store" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(threads, "notstored"))
    # a thread that has data keeps it, whatever fails later
    sbx.ok("exec", "-t", "kept", "--", "echo x > /mnt/user-data/workspace/f")
    sbx.ok("rm", "-t", "kept")
    p = sbx.run("exec", "-t", "kept", "--image", "nope:1", "--", "true")
    assert p.returncode == 1
    with open(os.path.join(threads, "kept", "user-data", "workspace", "f")) as f:
        assert f.read() == "x\n"
    assert sbx.ps() == []


def test_a_create_whose_entrypoint_fails_is_failed_and_logged(sbxd):  # noqa: F811
    s = sbxd()
    good = s.create()  # tail -f /dev/null
    bad = {}
    for name, ep in (("missing", ["/no/such/entrypoint"]), ("exit3", ["sh", "-c", "echo boom >&2; exit 3"])):
        r = s.req("POST", "/v1/sandboxes", {"image": {"uri": "host"}, "entrypoint": ep,
                                            "resourceLimits": {}, "timeout": 600})
        assert r.status == 202, r.body
        bad[name] = r.json()["id"]
    deadline = time.time() + slow(60)
    states = {}
    while time.time() < deadline:
        states = {n: s.req("GET", "/v1/sandboxes/" + i).json()["status"] for n, i in bad.items()}
        if all(st["state"] == "Failed" for st in states.values()):
            break
        time.sleep(0.2)
    assert states["exit3"]["state"] == "Failed" and states["exit3"]["reason"] == "ENTRYPOINT_FAILED", states
    assert "exited with code 3" in states["exit3"]["message"], states
    assert states["missing"]["state"] == "Failed" and states["missing"]["reason"] == "ENTRYPOINT_FAILED", states
    # the list says so too, and a filter on Failed finds them
    r = s.req("GET", "/v1/sandboxes?state=Failed").json()
    assert sorted(x["id"] for x in r["items"]) == sorted(bad.values()), r
    # each failure was logged, once
    logged = [l for l in s.logs if l.get("msg") == "sandbox entrypoint failed"]
    assert sorted(l["sandbox_id"] for l in logged) == sorted(bad.values()), logged
    assert {l["sandbox_id"]: l["exit_code"] for l in logged}[bad["exit3"]] == 3
    # the positive control: an entrypoint that runs keeps its sandbox Running
    assert s.req("GET", "/v1/sandboxes/" + good.id).json()["status"]["state"] == "Running"
    for i in list(bad.values()) + [good.id]:
        assert s.req("DELETE", "/v1/sandboxes/" + i).status == 204
