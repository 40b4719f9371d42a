"""The CLI's state directory and what a user sees of a sandbox's life (issue 35): a fixed default
home for root, read-only verbs that create nothing, evictions that are reported, and the
docker-like verbs (inspect, kill, pause/unpause, stats, rm --data)."""
import json
import re
import time
import os
import subprocess

import pytest

from conftest import SBX, alive, slow, thread_dir


def run_plain(args, cwd, env=None, timeout=60):
    """sbx without --home (and without $SBX_HOME): the default state directory."""
    e = {k: v for k, v in os.environ.items() if k != "SBX_HOME"}
    e.update(env or {})
    return subprocess.run([SBX] + args, cwd=cwd, env=e, capture_output=True, timeout=slow(timeout))


READ_ONLY = [["ps"], ["ps", "--json"], ["images"], ["image", "ls"], ["gc"], ["down"],
             ["config", "show"], ["config", "check"], ["doctor"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's default state directory")
def test_root_default_home_is_fixed_and_read_only_verbs_create_nothing(tmp_path):
    """As root the state is /var/lib/sbx (made 0700 at first use) wherever the CLI is started;
    ps, images, gc, down, config and doctor leave no folder behind. /var/lib is a fresh tmpfs in
    a mount namespace of the test's own, so the host's /var/lib/sbx is not touched."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    script = r"""
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /var/lib
for v in %(ro)s; do
  (cd %(a)s && eval "$SBX $v" >/dev/null 2>&1) || true
done
[ ! -e /var/lib/sbx ] && echo NO-HOME-AFTER-READS
[ -z "$(ls -A %(a)s)" ] && echo NO-DOT-SBX
cd %(a)s && $SBX exec -t demo -- 'echo hi > /tmp/mark' >/dev/null
stat -c 'MODE %%a' /var/lib/sbx
cd %(b)s && $SBX ps --json
cd %(b)s && $SBX exec -t demo -- 'cat /tmp/mark'
$SBX down
[ -z "$(ls -A %(a)s)" ] && [ -z "$(ls -A %(b)s)" ] && echo NO-DOT-SBX-AFTER
""" % {"ro": " ".join("'%s'" % " ".join(v) for v in READ_ONLY), "a": a, "b": b}
    e = {k: v for k, v in os.environ.items() if k != "SBX_HOME"}
    e["SBX"] = SBX
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], env=e, capture_output=True,
                       text=True, timeout=slow(120))
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = p.stdout
    assert "NO-HOME-AFTER-READS" in out and "NO-DOT-SBX" in out, out
    assert "MODE 700" in out, out
    ps = json.loads(next(l for l in out.splitlines() if l.startswith("{")))
    assert [s["thread"] for s in ps["sandboxes"]] == ["demo"], ps
    assert "hi" in out.splitlines(), out  # the same sandbox from the other folder
    assert "NO-DOT-SBX-AFTER" in out, out


def test_read_only_verbs_create_no_home(tmp_path):
    """With --home naming a folder that does not exist, the read-only verbs answer (an empty
    pool, no images) and leave it uncreated."""
    home = tmp_path / "nothing"
    for v in READ_ONLY:
        p = subprocess.run([SBX, "--home", str(home)] + v, capture_output=True, timeout=slow(60))
        assert p.returncode in (0, 1) if v == ["doctor"] else p.returncode == 0, (v, p.stderr)
        assert not home.exists(), v
    p = subprocess.run([SBX, "--home", str(home), "ps", "--json"], capture_output=True)
    assert json.loads(p.stdout)["sandboxes"] == []


def test_help_names_the_default_home():
    p = subprocess.run([SBX, "--help"], capture_output=True, text=True)
    assert "/var/lib/sbx as root" in p.stdout


def test_replica_eviction_is_reported_by_ps_exec_and_rm(sbx, tmp_path):
    """With replicas: 2, a third thread evicts the warm sandbox idle longest: ps lists the
    eviction with its reason, the evicted thread's next exec says so once on stderr (a new
    sandbox: its /tmp mark is gone), and rm -t of an evicted thread answers about the thread."""
    cfg = tmp_path / "cap.yaml"
    cfg.write_text("sandbox:\n  replicas: 2\n")
    sbx.config = str(cfg)
    sbx.ok("exec", "-t", "one", "--", "touch /tmp/mark")
    sbx.ok("exec", "-t", "two", "--", "true")
    sbx.ok("exec", "-t", "three", "--", "true")  # evicts "one", idle longest
    ps = sbx.json("ps", "--json")
    assert sorted(s["thread"] for s in ps["sandboxes"]) == ["three", "two"]
    [ev] = ps["evicted"]
    assert ev["thread"] == "one" and ev["user"] == "default", ev
    assert "replica" in ev["reason"] and "replicas is 2" in ev["reason"], ev
    text = sbx.ok("ps")
    assert "evicted: thread one (user default)" in text, text

    p = sbx.run("exec", "-t", "one", "--", "test -e /tmp/mark && echo still || echo gone", check=0)
    assert p.stdout == b"gone\n"
    err = p.stderr.decode()
    assert "thread one (user default)" in err and "evicted" in err and "replica" in err, err
    # reported once: the next call is quiet; "one"'s new sandbox evicted "two" (idle longest)
    p = sbx.run("exec", "-t", "one", "--", "true", check=0)
    assert b"evicted" not in p.stderr, p.stderr
    assert [e["thread"] for e in sbx.json("ps", "--json")["evicted"]] == ["two"]
    p = sbx.run("rm", "-t", "two", check=0)
    err = p.stderr.decode()
    assert "thread two (user default) has no sandbox: it was evicted" in err, err
    assert not re.search(r"\b[0-9a-f]{16}\b", err.split("(", 2)[-1].split("replica")[0]), err
    assert sbx.json("ps", "--json")["evicted"] == []
    # and a thread that never had one is an error about the thread
    p = sbx.run("rm", "-t", "never", check=1)
    assert p.stderr == b"sbx: thread never (user default) has no sandbox\n", p.stderr


def test_idle_reaper_eviction_is_reported(sbx, tmp_path):
    cfg = tmp_path / "idle.yaml"
    cfg.write_text("sandbox:\n  idle_timeout: 1\n")
    sbx.config = str(cfg)
    sbx.ok("exec", "-t", "idle", "--", "true")
    time.sleep(2.5)
    assert sbx.ok("gc") == "reaped 1 sandbox\n"
    [ev] = sbx.json("ps", "--json")["evicted"]
    assert ev["thread"] == "idle" and "idle_timeout (1 s)" in ev["reason"], ev
    p = sbx.run("exec", "-t", "idle", "--", "true", check=0)
    assert b"thread idle (user default): its sandbox" in p.stderr and b"idle reaper" in p.stderr
    # a record nobody came back for in a week is dropped by the reaper
    time.sleep(2.5)
    assert sbx.ok("gc") == "reaped 1 sandbox\n"
    [ev] = sbx.json("ps", "--json")["evicted"]
    path = os.path.join(sbx.home, "evicted", ev["id"])
    with open(path) as f:
        rec = json.load(f)
    rec["time"] -= 8 * 86400
    with open(path, "w") as f:
        json.dump(rec, f)
    sbx.ok("gc")
    assert sbx.json("ps", "--json")["evicted"] == [] and not os.path.exists(path)


def test_rm_data_removes_the_thread_folder(sbx):
    sbx.ok("exec", "-t", "d", "--", "echo x > /mnt/user-data/outputs/x")
    folder = os.path.dirname(thread_dir(sbx, "d"))
    assert os.path.exists(os.path.join(folder, "user-data", "outputs", "x"))
    sbx.ok("rm", "-t", "d")
    assert os.path.exists(folder)  # plain rm keeps it
    sbx.ok("exec", "-t", "d", "--", "true")
    assert sbx.run("rm", "-t", "d", "--data", check=0).stderr == b""
    assert not os.path.exists(folder) and sbx.ps() == []
    # nothing left: an error about the thread; a folder without a sandbox is removed quietly
    p = sbx.run("rm", "-t", "d", "--data", check=1)
    assert p.stderr == b"sbx: thread d (user default) has no sandbox and no folder\n"
    os.makedirs(os.path.join(folder, "user-data"))
    sbx.ok("rm", "-t", "d", "--data")
    assert not os.path.exists(folder)
    assert sbx.run("rm", "-t", "../x", "--data").returncode != 0
    assert os.path.exists(sbx.home)


def test_sandbox_whose_state_folder_is_deleted_ends_itself(tmp_path):
    """A home deleted under a running sandbox (a test's tmp folder, rm -rf by hand) leaves
    nothing that could list or destroy it: its init notices (the lease file it holds is
    unlinked) and exits within a few seconds, taking its processes with it."""
    home = tmp_path / "gone"
    subprocess.run([SBX, "--home", str(home), "exec", "-t", "o", "--", "sleep 1000 &"],
                   check=True, capture_output=True, timeout=slow(60))
    [pid] = [s["pid"] for s in json.loads(subprocess.run(
        [SBX, "--home", str(home), "ps", "--json"], capture_output=True).stdout)["sandboxes"]]
    assert alive(pid)
    time.sleep(3)
    assert alive(pid)  # idle, warm, home intact: it stays
    subprocess.run(["rm", "-rf", "--one-file-system", str(home)], check=True)
    deadline = time.monotonic() + slow(15)
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid), "the orphaned sandbox's init %d still runs" % pid


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _comms(sbx, thread):
    """The command names of the sandbox's processes, seen from inside."""
    r = sbx.sh(thread, "for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done")
    return r["stdout"].split()


BG = "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &"


def test_inspect_by_scope_and_by_id(sbx):
    sbx.ok("exec", "-t", "ins", "--", "true")
    j = json.loads(sbx.ok("inspect", "-t", "ins"))
    assert j["thread"] == "ins" and j["user"] == "default" and j["state"] == "warm", j
    assert j["paused"] is False and alive(j["pid"]) and j["owners"] == []
    assert j["user_data"] == thread_dir(sbx, "ins") and os.path.isdir(j["user_data"])
    assert os.path.isdir(j["state_dir"]) and j["state_dir"].endswith("/sandboxes/" + j["id"])
    live = {"idle": 0, "memory": 0}  # readings that move between two calls
    assert json.loads(sbx.ok("inspect", j["id"])) | live == j | live
    # usage errors (2) and a missing sandbox (1), each said in one line
    for bad in (["inspect"], ["inspect", "xyz"], ["inspect", "-t", "ins", j["id"]],
                ["inspect", "--bogus", j["id"]]):
        p = sbx.run(*bad)
        assert p.returncode == 2 and p.stderr.startswith(b"sbx inspect: "), (bad, p.stderr)
    p = sbx.run("inspect", "-t", "nosuch", check=1)
    assert p.stderr == b"sbx: thread nosuch (user default) has no sandbox\n"
    p = sbx.run("inspect", "0123456789abcdef", check=1)
    assert p.stderr == b"sbx: no sandbox 0123456789abcdef\n"
    for verb in ("inspect", "kill", "pause", "unpause", "rm", "stats"):
        p = sbx.run(verb, "--help", check=0)
        assert p.stdout.startswith(b"Usage: sbx " + verb.encode()), verb


def test_kill_signals_the_commands_and_keeps_the_sandbox(sbx):
    sbx.ok("exec", "-t", "k", "--", "echo keep > /tmp/keep; " + BG + " " + BG)
    pid = sbx.ps()[0]["pid"]
    assert _comms(sbx, "k").count("sleep") == 2
    out = sbx.ok("kill", "-s", "TERM", "-t", "k")
    assert re.fullmatch(r"signalled [2-9]\d* processes\n", out), out
    deadline = time.monotonic() + slow(10)
    while "sleep" in _comms(sbx, "k") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "sleep" not in _comms(sbx, "k")
    assert sbx.ps()[0]["pid"] == pid  # the same sandbox, its /tmp kept
    assert sbx.sh("k", "cat /tmp/keep")["stdout"] == "keep\n"
    # by id, the default signal (KILL); bad signals are usage errors
    sbx.ok("exec", "-t", "k", "--", BG)
    assert sbx.ok("kill", sbx.ps()[0]["id"]).startswith("signalled ")
    assert "sleep" not in _comms(sbx, "k")
    for bad in ("NOPE", "0", "99"):
        assert sbx.run("kill", "-s", bad, "-t", "k").returncode == 2
    p = sbx.run("kill", "-t", "none", check=1)
    assert p.stderr == b"sbx: thread none (user default) has no running sandbox\n"
    p = sbx.run("kill", "0123456789abcdef", check=1)
    assert p.stderr == b"sbx: no running sandbox 0123456789abcdef\n"
    for verb in ("pause", "unpause"):
        p = sbx.run(verb, "0123456789abcdef", check=1)
        assert p.stderr == b"sbx: no sandbox 0123456789abcdef\n"
        p = sbx.run(verb, "-t", "none", check=1)
        assert p.stderr == b"sbx: thread none (user default) has no sandbox\n"


@pytest.mark.parametrize("manager", ["auto", "none"])
def test_pause_and_unpause(sbx, tmp_path, manager):
    """With a freezer (auto) and without one (cgroup_manager: none: each process is stopped with
    SIGSTOP, and unpause continues only those it stopped)."""
    if manager == "none":
        cfg = tmp_path / "nocg.yaml"
        cfg.write_text("sandbox:\n  cgroup_manager: none\n  cgroup_required: false\n")
        sbx.config = str(cfg)
    # a process the user stopped on purpose stays stopped across pause/unpause
    sbx.ok("exec", "-t", "p", "--", BG + " " + BG + " setsid sh -c 'kill -STOP $$; exec sleep 999' "
           "</dev/null >/dev/null 2>&1 &")
    pid = sbx.ps()[0]["pid"]
    deadline = time.monotonic() + slow(10)
    while True:
        kids = subprocess.run(["ps", "-o", "pid=,stat=,args=", "--ppid", str(pid)],
                              capture_output=True, text=True).stdout.splitlines()
        sleeps = {int(l.split()[0]): l.split()[-1] for l in kids if "sleep" in l}
        if sorted(sleeps.values()) == ["1000", "1000", "999"] and all(
                l.split()[1].startswith("T") for l in kids if l.split()[-1] == "999"):
            break
        assert time.monotonic() < deadline, kids
        time.sleep(0.1)
    held = next(p for p, a in sleeps.items() if a == "999")
    sbx.ok("pause", "-t", "p")
    assert sbx.ps()[0]["paused"] is True
    assert json.loads(sbx.ok("inspect", "-t", "p"))["paused"] is True
    if manager == "none":
        assert _state(pid) == "T" and all(_state(p) == "T" for p in sleeps)
    sbx.ok("unpause", "-t", "p")
    assert sbx.ps()[0]["paused"] is False
    assert all(_state(p) != "T" for p in sleeps if p != held) and _state(pid) != "T"
    assert _state(held) == "T"
    assert sbx.sh("p", "echo after")["stdout"] == "after\n"


def test_stats(sbx, tmp_path):
    sbx.ok("exec", "-t", "s1", "--", "true")
    sbx.ok("exec", "-t", "s2", "--", "true")
    j = sbx.json("stats", "--json")["sandboxes"]
    assert sorted(s["thread"] for s in j) == ["s1", "s2"], j
    for s in j:  # root, a cgroup each: figures, within their limits
        assert s["memory"] > 0 and s["memory_limit"] >= s["memory"] and s["cpus"] > 0, s
        assert s["cpu_seconds"] >= 0, s
    one = sbx.json("stats", "--json", "-t", "s1")["sandboxes"]
    assert [s["thread"] for s in one] == ["s1"]
    text = sbx.ok("stats")
    assert text.startswith("ID ") and len(text.splitlines()) == 3, text
    p = sbx.run("stats", "-t", "nosuch", check=1)
    assert p.stderr == b"sbx: thread nosuch (user default) has no sandbox\n"
    assert sbx.run("stats", "bad-id").returncode == 2
    # no cgroup: "-" (null), not an error
    cfg = tmp_path / "nocg.yaml"
    cfg.write_text("sandbox:\n  cgroup_manager: none\n  cgroup_required: false\n")
    sbx.config = str(cfg)
    sbx.ok("exec", "-t", "s3", "--", "true")
    [s3] = sbx.json("stats", "--json", "-t", "s3")["sandboxes"]
    assert s3["memory"] is None and s3["cpus"] is None, s3
