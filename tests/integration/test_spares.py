"""Spares (configuration key `spares`, src/lib/spares.c): sandboxes started ahead of time and
taken by the next create. Each test checks what a taken spare must be indistinguishable from (a
sandbox launched for that id) and what must never leak between them."""
import fcntl
import json
import os
import re
import signal
import subprocess
import time

from conftest import alive, thread_dir


def cfg(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def spare_ids(sbx):
    d = os.path.join(sbx.home, "spare", "sandboxes")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def spare_pids(sbx):
    """PIDs 1 of the spares that are ready: launched, and no longer locked by their filler."""
    pids = []
    for sid in spare_ids(sbx):
        try:
            with open(os.path.join(sbx.home, "spare", "sandboxes", sid, "meta")) as f:
                pid = json.load(f)["pid"]
            with open(os.path.join(sbx.home, "spare", "locks", sid), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if pid > 0:
                pids.append(pid)
        except (OSError, ValueError, KeyError):
            pass
    return pids


def wait_spares(sbx, n, timeout=20):
    """Waits until n spares are ready (made by the detached filler)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(spare_pids(sbx)) == n and len(spare_ids(sbx)) == n:
            return spare_ids(sbx)
        time.sleep(0.05)
    raise AssertionError("expected %d spares, have %s" % (n, spare_ids(sbx)))


def test_no_spares_by_default(sbx):
    sbx.ok("run", "--", "true")
    time.sleep(0.5)
    assert spare_ids(sbx) == []
    assert sbx.json("ps", "--json")["spares"] == {"ready": 0, "configured": 0}


def test_cli_refills_and_a_run_takes_one(make_sbx, tmp_path):
    s = make_sbx(config=cfg(tmp_path, "sandbox:\n  spares: 2\n"))
    s.ok("run", "--", "true")  # nothing ready yet: launched; the CLI starts a filler
    before = wait_spares(s, 2)
    assert s.json("ps", "--json")["spares"] == {"ready": 2, "configured": 2}
    assert "spares: 2 (configured: 2)" in s.ok("ps")
    p = s.run("run", "--", "hostname; cat /etc/hostname; tail -1 /etc/hosts; ls /mnt/user-data",
              env={"SBX_DEBUG": "1"}, check=0)
    err = p.stderr.decode()
    m = re.search(r"sandbox ([0-9a-f]{16}): took spare ([0-9a-f]{16})", err)
    assert m, err
    new_id, taken = m.group(1), m.group(2)
    assert taken in before and new_id not in before
    # named after its own id everywhere, not after the spare
    out = p.stdout.decode().split("\n")
    assert out[0] == "sbx-" + new_id and out[1] == "sbx-" + new_id
    assert out[2].endswith("sbx-" + new_id)
    assert out[3:6] == ["outputs", "uploads", "workspace"]
    # the throw-away sandbox is gone with its run, and the pool is refilled
    assert s.ps() == []
    after = wait_spares(s, 2)
    assert taken not in after


def test_taken_spares_share_nothing(make_sbx, tmp_path):
    s = make_sbx(config=cfg(tmp_path, "sandbox:\n  spares: 1\n"))
    s.ok("run", "--", "true")
    wait_spares(s, 1)
    s.ok("run", "--", "echo secret > /mnt/user-data/workspace/f; echo secret > /tmp/f")
    wait_spares(s, 1)
    out = s.ok("run", "--", "cat /mnt/user-data/workspace/f /tmp/f 2>&1; true")
    assert "secret" not in out and "No such file" in out


def test_scope_from_a_spare_gets_its_thread_folder(make_sbx, tmp_path):
    s = make_sbx(config=cfg(tmp_path, "sandbox:\n  spares: 1\n"))
    s.ok("run", "--", "true")
    [sid] = wait_spares(s, 1)
    os.makedirs(thread_dir(s, "t1") + "/workspace", exist_ok=True)
    r = s.sh("t1", "hostname; echo in > /mnt/user-data/workspace/from-inside; "
             "ls /mnt/user-data; touch /x 2>&1; umount /mnt/user-data 2>&1; "
             "grep -c ' /mnt/user-data ' /proc/self/mountinfo")
    assert r["exit_code"] == 0, r
    [box] = s.ps()
    assert box["thread"] == "t1" and box["id"] != sid
    lines = r["stdout"].split("\n")
    assert lines[0] == "sbx-" + box["id"]
    assert lines[1:4] == ["outputs", "uploads", "workspace"]
    assert "Read-only file system" in lines[4]  # / is read-only again after the adoption
    assert "umount" in lines[5] and lines[6] == "1"  # one mount there (the spare's is gone)
    with open(os.path.join(thread_dir(s, "t1"), "workspace", "from-inside")) as f:
        assert f.read() == "in\n"
    # the spare's own state folder moved: it is that sandbox now
    assert not os.path.exists(os.path.join(s.home, "spare", "sandboxes", sid))
    # it is reclaimed like any other warm sandbox
    s.ok("release", "-t", "t1")
    assert s.sh("t1", "cat /mnt/user-data/workspace/from-inside")["stdout"] == "in\n"


def test_spares_of_another_configuration_are_replaced(make_sbx, tmp_path):
    home = tmp_path / "shared"
    a = make_sbx(home=home, config=cfg(tmp_path, "sandbox:\n  spares: 1\n", "a.yaml"))
    a.ok("run", "--", "true")
    [old] = wait_spares(a, 1)
    old_pid = spare_pids(a)[0]
    b = make_sbx(home=home, config=cfg(tmp_path, "sandbox:\n  spares: 1\n  tmp_size_mib: 64\n",
                                       "b.yaml"))
    p = b.run("run", "--", "df -m /tmp | tail -1", env={"SBX_DEBUG": "1"}, check=0)
    assert "took spare" not in p.stderr.decode()
    assert p.stdout.split()[1] == b"64"
    [new] = wait_spares(b, 1)
    assert new != old and not alive(old_pid)


def test_dead_spares_are_reaped_and_down_removes_them(make_sbx, tmp_path):
    s = make_sbx(config=cfg(tmp_path, "sandbox:\n  spares: 2\n"))
    s.ok("run", "--", "true")
    wait_spares(s, 2)
    pids = spare_pids(s)
    os.kill(pids[0], signal.SIGKILL)
    time.sleep(0.2)
    s.ok("gc")
    # gc removed the dead one; the verb's filler made a replacement, never taken while dead
    wait_spares(s, 2)
    assert pids[0] not in spare_pids(s)
    pids = spare_pids(s)
    # down right after a verb that started a filler: the filler yields to it
    s.ok("run", "--", "true")
    s.ok("down")
    time.sleep(1)
    assert spare_ids(s) == []
    for pid in pids:
        assert not alive(pid)


def test_cli_output_is_not_held_by_the_filler(make_sbx, tmp_path):
    """A caller reading the CLI's output until EOF is not kept waiting by the detached filler."""
    s = make_sbx(config=cfg(tmp_path, "sandbox:\n  spares: 4\n"))
    start = time.time()
    p = subprocess.Popen(s.cmd("run", "--", "echo hi"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, _ = p.communicate(timeout=30)
    assert out == b"hi\n" and p.returncode == 0
    assert time.time() - start < 5
