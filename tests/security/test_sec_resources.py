"""Resource exhaustion (docs/security.md, "Resources"): a fork bomb, memory, full tmpfs mounts,
inodes, open files, CPU, an output flood and a 1 GiB line without a newline. Each attack must
stay inside its sandbox: a neighbour sandbox keeps answering promptly, the host's free memory
stays sane, and the attacked sandbox serves again afterwards (itself or a cold-started
replacement). Limits are lowered (memory 256 MiB, 128 pids, 64 MiB /tmp) to keep this quick."""
import json
import os
import subprocess
import sys
import time

import pytest

import sbxsec
from sbxsec import WS

LIMITS = dict(memory_mib=256, pids=128, tmp_size_mib=64, home_size_mib=32)
if sbxsec.SANITIZED:
    LIMITS["memory_mib"] = 768  # sbx-init's ASan shadow and allocator cost memory too
HOST_SLACK_KIB = 512 * 1024  # host memory the attack may cost beyond the sandbox's limit


@pytest.fixture
def pair(make_sbx, probe_bin):
    """(sbx, prober, attacker thread, neighbour thread), both sandboxes running."""
    s = make_sbx(**LIMITS)
    prober = sbxsec.Prober(s, probe_bin)
    a, b = sbxsec.new_thread("attacker"), sbxsec.new_thread("neighbour")
    prober.install(a)
    s.sh(b, "true")
    return s, prober, a, b


def _still_serves(s, thread):
    r = s.sh(thread, "echo alive", timeout=60)
    assert r["stdout"] == "alive\n", r


def _mem_check(hb, before_kib):
    floor = before_kib - LIMITS["memory_mib"] * 1024 - HOST_SLACK_KIB
    assert hb.min_mem > floor, "host MemAvailable fell from %d to %d KiB" % (before_kib, hb.min_mem)


def test_fork_bomb(pair):
    s, prober, a, b = pair
    procs_before = sbxsec.nr_procs()
    mem_before = sbxsec.mem_available_kib()
    with sbxsec.Heartbeat(s, b) as hb:
        res, r = prober.run(a, "forkbomb", 3, timeout=120, exec_timeout=60)
    peak = hb.max_procs
    hb.check()
    _mem_check(hb, mem_before)
    forked = int(res["forked"])
    print("fork bomb: %d processes, then %s; host processes %d -> peak %d" % (
        forked, res["fork_refused"], procs_before, peak))
    assert forked < LIMITS["pids"], forked  # sbx-init and the shell count too
    assert res["fork_refused"] == "EAGAIN"
    assert peak < procs_before + LIMITS["pids"] + 64  # (other users of the host come and go)
    assert sbxsec.nr_procs() < procs_before + 50
    _still_serves(s, a)


def test_memory_exhaustion(pair):
    s, prober, a, b = pair
    mem_before = sbxsec.mem_available_kib()
    with sbxsec.Heartbeat(s, b) as hb:
        res, r = prober.run(a, "memhog", 4096, timeout=120, exec_timeout=60)
    hb.check()
    _mem_check(hb, mem_before)
    # the hog was killed by the cgroup's OOM killer long before 4 GiB
    touched = max(int(l.split()[1]) for l in r["stdout"].splitlines() if l.startswith("touched"))
    assert touched < LIMITS["memory_mib"], touched
    print("memory hog: killed after %d MiB (exit %s)" % (touched, r["exit_code"]))
    assert r["exit_code"] in (-9, 137), r["exit_code"]
    _still_serves(s, a)


def test_tmpfs_mounts_full(pair):
    s, prober, a, b = pair
    mem_before = sbxsec.mem_available_kib()
    with sbxsec.Heartbeat(s, b) as hb:
        r = s.sh(a, "for d in /tmp /root /dev/shm /run; do "
                 "head -c 300M /dev/zero > $d/fill 2>/dev/null; echo $d rc=$? $(du -m $d/fill | cut -f1); "
                 "done", timeout=120)
    hb.check()
    _mem_check(hb, mem_before)
    lines = r["stdout"].strip().splitlines()
    assert len(lines) == 4, r
    for line in lines:
        d, rc, mib = line.split()
        assert rc == "rc=1" and int(mib) <= 64, line  # ENOSPC at the mount's size
    # a clear error for a write through the contract, and the sandbox still serves
    p = s.run("write", "-t", a, "/tmp/more.txt", input=b"x" * 65536)
    assert p.returncode == 1 and b"No space left on device" in p.stderr, p.stderr
    s.sh(a, "rm -f /tmp/fill /root/fill /dev/shm/fill /run/fill")
    _still_serves(s, a)


def test_inode_exhaustion(pair):
    s, prober, a, b = pair
    mem_before = sbxsec.mem_available_kib()
    t0 = time.monotonic()
    with sbxsec.Heartbeat(s, b) as hb:
        res, r = prober.run(a, "inodes", "/tmp", 200000, timeout=120, exec_timeout=90)
    hb.check()
    _mem_check(hb, mem_before)
    assert time.monotonic() - t0 < 90
    # bounded by the tmpfs's inode count or its memory charge; either way contained
    assert int(res["created"]) <= 200000
    print("inodes: %s files created in /tmp (%s)" % (res["created"], res.get("create_refused", "-")))
    s.sh(a, "rm -rf /tmp/i*", timeout=120)
    _still_serves(s, a)


def test_open_files(pair):
    s, prober, a, b = pair
    mem_before = sbxsec.mem_available_kib()
    with sbxsec.Heartbeat(s, b) as hb:
        r = s.sh(a, "for i in 1 2 3 4; do %s/probe nofile > /tmp/nofile.$i & done; wait; "
                 "cat /tmp/nofile.*" % WS, timeout=120)
    hb.check()
    _mem_check(hb, mem_before)
    lines = [l.split() for l in r["stdout"].splitlines()]
    raised = [l[1] for l in lines if l[0] == "raise_rlimit_nofile"]
    refused = [l[1] for l in lines if l[0] == "open_refused"]
    assert len(raised) == 4 and len(refused) == 4, r
    assert set(raised) == {"EPERM"}  # no CAP_SYS_RESOURCE
    assert set(refused) == {"EMFILE"}
    # commands start at 1024 open files and may go up to the sandbox's hard limit, no further
    limits = [l[1:] for l in lines if l[0] == "rlimit_nofile"]
    assert limits and all(l[0] == "1024" for l in limits), limits
    assert [l[1] for l in lines if l[0] == "raise_soft_to_hard"] == ["ok"] * 4
    assert all(int(l[1]) >= int(limits[0][1]) - 10 for l in lines if l[0] == "opened"), lines
    print("open files: 4 x %s descriptors, then EMFILE; raising the limit: %s" % (
        [l[1] for l in lines if l[0] == "opened"][0], raised[0]))
    _still_serves(s, a)


def test_cpu_burn(pair):
    s, prober, a, b = pair
    with sbxsec.Heartbeat(s, b, interval=0.3) as hb:
        s.sh(a, "for i in 1 2 3 4 5 6; do %s/probe spin 4 & done; wait" % WS, timeout=120)
    hb.check(max_latency=3.0, min_samples=5)
    _still_serves(s, a)


def _run_measured(cmd, out_path, timeout):
    """Runs cmd with stdout into a file; returns (exit status, max RSS of cmd in KiB)."""
    code = ("import resource, subprocess, sys\n"
            "with open(sys.argv[1], 'wb') as f:\n"
            "    p = subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.DEVNULL)\n"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    p = subprocess.run([sys.executable, "-c", code, out_path] + cmd, capture_output=True,
                       timeout=timeout)
    rc, rss = p.stdout.split()
    return int(rc), int(rss)


def test_output_flood(pair, tmp_path):
    s, prober, a, b = pair
    out = str(tmp_path / "flood.json")
    t0 = time.monotonic()
    with sbxsec.Heartbeat(s, b) as hb:
        rc, rss = _run_measured(s.cmd("exec", "-t", a, "--json", "--", "yes | head -c 500M"),
                                out, timeout=180)
    hb.check()
    assert rc == 0 and time.monotonic() - t0 < 120
    r = json.load(open(out))
    assert len(r["stdout"]) <= (10 << 20) + 4096
    assert "output truncated" in r["output"]
    assert rss < 256 * 1024, "the CLI grew to %d KiB for a 500 MB flood" % rss
    print("output flood: 500 MB in %.1f s, %d bytes kept, CLI max RSS %d KiB" % (
        time.monotonic() - t0, len(r["stdout"]), rss))
    _still_serves(s, a)


def test_one_gib_line_without_newline(pair, tmp_path):
    s, prober, a, b = pair
    out = str(tmp_path / "line.json")
    t0 = time.monotonic()
    with sbxsec.Heartbeat(s, b) as hb:
        rc, rss = _run_measured(
            s.cmd("exec", "-t", a, "--json", "--", "head -c 1073741824 /dev/zero | tr '\\0' a"),
            out, timeout=240)
    hb.check()
    assert rc == 0 and time.monotonic() - t0 < 180
    r = json.load(open(out))
    assert r["exit_code"] == 0 and len(r["stdout"]) <= (10 << 20) + 4096
    assert "of 1073741824 bytes" in r["output"]
    assert rss < 256 * 1024, rss
    print("1 GiB line: %.1f s, %d bytes kept, CLI max RSS %d KiB" % (
        time.monotonic() - t0, len(r["stdout"]), rss))
    # the same as a file (sparse: no disk is used): every operation refuses or skips it quickly
    s.sh(a, "truncate -s 1G %s/big && printf 'needle' >> %s/big" % (WS, WS))
    t0 = time.monotonic()
    p = s.run("read", "-t", a, WS + "/big", timeout=120)
    assert p.returncode == 1 and b"exceeds maximum read size" in p.stderr, p.stderr
    p = s.run("download", "-t", a, WS + "/big", timeout=120)
    assert p.returncode == 1 and b"exceeds maximum download size" in p.stderr, p.stderr
    p = s.run("grep", "-t", a, WS, "needle", "--json", timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["matches"] == []
    assert time.monotonic() - t0 < 60
    s.sh(a, "rm -f %s/big" % WS)
    _still_serves(s, a)


INOTIFY_HOLD = r"""
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
print("held", len(fds), flush=True)
time.sleep(float(sys.argv[1]))
"""

INOTIFY_ONE = "import ctypes; l = ctypes.CDLL(None, use_errno=True); fd = l.inotify_init1(0); " \
              "print(fd, ctypes.get_errno())"


def test_inotify_exhaustion_stays_inside(pair):
    """A sandbox holding every inotify instance it can get leaves host root and a neighbour
    sandbox able to make theirs: each user namespace is owned by its own host uid, which the
    kernel charges instead of host root (regression: all sandboxes and root shared root's 128)."""
    s, prober, a, b = pair
    s.run("upload", "-t", a, WS + "/hold.py", input=INOTIFY_HOLD.encode(), check=0)
    p = sbxsec.spawn_cli(s, "exec", "-t", a, "--", "python3 %s/hold.py 1.5" % WS,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline()  # the sandbox holds every instance it could get
        assert line.startswith(b"held"), line
        host = subprocess.run([sys.executable, "-c", INOTIFY_ONE], capture_output=True,
                              timeout=30).stdout.split()
        neighbour = s.sh(b, "python3 -c '%s'" % INOTIFY_ONE)["stdout"].split()
    finally:
        p.communicate(timeout=60)
    assert int(host[0]) >= 0, "host root cannot create an inotify instance (errno %s)" % host[1]
    assert int(neighbour[0]) >= 0, "a neighbour sandbox cannot (errno %s)" % neighbour[1]


@pytest.mark.xfail(strict=True, reason=(
    "without sandbox.user_data_size_mib (the default: the image costs a mkfs on a thread's first "
    "use) /mnt/user-data is a bind mount of the host thread folder without any quota: a sandbox "
    "can fill the host file system that holds $SBX_HOME (blocks and inodes). Checked without "
    "filling the disk: the space the sandbox sees there must be bounded. See docs/security.md, "
    "'Known gaps'."))
def test_user_data_space_is_bounded(sbx, thread):
    r = sbx.sh(thread, "stat -f -c '%S %b %c' /mnt/user-data")
    bsize, blocks, inodes = (int(x) for x in r["stdout"].split())
    assert bsize * blocks <= 64 << 30, "the sandbox may write %d GiB to the host" % (
        bsize * blocks >> 30)


def _umount_thread(s, thread):
    d = sbxsec.thread_dir(s, thread)
    subprocess.run(["umount", d], check=False)


def test_user_data_size_limit_holds(make_sbx):
    """With user_data_size_mib, the thread folder is a size-capped image mounted at the folder
    itself: a command writing past it gets ENOSPC, the host's disk holds no more than the size,
    the host sees the files where they always were (what the folder held before is kept), and
    the next sandbox of the thread finds them (regression: one command wrote 1.5 GiB)."""
    s = make_sbx(user_data_size_mib=64)
    t = sbxsec.new_thread("quota")
    folder = sbxsec.thread_dir(s, t)
    os.makedirs(os.path.join(folder, "uploads"), exist_ok=True)
    with open(os.path.join(folder, "uploads", "before.txt"), "w") as f:
        f.write("from the harness\n")
    try:
        # positive control: 8 MiB fit, and the host sees them at once
        r = s.sh(t, "head -c 8M /dev/zero > %s/small && cat /mnt/user-data/uploads/before.txt"
                 % WS)
        assert r["exit_code"] == 0 and r["stdout"] == "from the harness\n", r
        assert os.path.getsize(os.path.join(folder, "workspace", "small")) == 8 << 20
        r = s.sh(t, "head -c 200M /dev/zero > %s/big; echo rc=$?; "
                 "stat -f -c '%%S %%b' /mnt/user-data" % WS, timeout=120)
        lines = r["stdout"].split("\n")
        assert lines[0] == "rc=1" and "No space left on device" in r["stderr"], r
        bsize, blocks = (int(x) for x in lines[1].split())
        assert bsize * blocks <= 64 << 20, lines
        big = os.path.getsize(os.path.join(folder, "workspace", "big"))
        print("user-data quota: 200 MiB write stopped at %d MiB (ENOSPC)" % (big >> 20))
        assert big < 64 << 20
        # what the thread costs the host's disk: the image's allocated blocks (a free-space
        # delta would count other users of this shared machine)
        used = os.stat(folder + ".img").st_blocks * 512
        assert used <= 64 << 20, "the host's disk holds %d MiB of the thread" % (used >> 20)
        # a write through the contract says so too
        p = s.run("write", "-t", t, WS + "/more.txt", input=b"x" * (1 << 20))
        assert p.returncode == 1 and b"No space left on device" in p.stderr, p.stderr
        # the thread's files outlive the sandbox
        s.run("rm", "-t", t, check=0)
        r = s.sh(t, "ls %s; rm %s/big && echo freed" % (WS, WS))
        assert "small" in r["stdout"] and "freed" in r["stdout"], r
    finally:
        s.down()
        _umount_thread(s, t)
