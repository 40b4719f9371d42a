"""Host-wide kernel budgets and surfaces that namespaces do not split (docs/security.md, "Shared
kernel budgets"): socket families (AF_VSOCK reaches the VM host), Linux AIO (fs.aio-max-nr), the
pseudo-terminal pool, TCP buffer memory on cgroup v1, the host's file table, and the mount flags
of the folders a sandbox writes for the host. Each test runs its probe on the host (or in a
state the fix does not change) first: the positive control that the probe can succeed."""
import fcntl
import json
import os
import subprocess
import sys
import time

import pytest

import sbxsec
from sbxsec import WS

# One probe script, run both on the host (positive controls) and inside sandboxes.
PROBE = r'''
import ctypes, errno, json, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def err(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def sock(fam, typ, proto=0):
    fd = libc.socket(ctypes.c_int(fam), ctypes.c_int(typ), ctypes.c_int(proto))
    if fd >= 0:
        os.close(fd)
    return err(fd)
def pair(fam):
    sv = (ctypes.c_int * 2)()
    r = libc.socketpair(ctypes.c_int(fam), ctypes.c_int(socket.SOCK_STREAM), 0, sv)
    if r == 0:
        os.close(sv[0]); os.close(sv[1])
    return err(r)
cmd = sys.argv[1]
if cmd == "families":
    out = {}
    for name, fam, typ, proto in [
            ("unix", 1, 1, 0), ("inet", 2, 1, 0), ("inet6", 10, 1, 0), ("netlink_route", 16, 3, 0),
            ("netlink_sock_diag", 16, 3, 4), ("vsock", 40, 1, 0), ("vsock_dgram", 40, 2, 0),
            ("packet", 17, 3, 0), ("key", 15, 3, 2), ("alg", 38, 5, 0), ("tipc", 30, 5, 0),
            ("bluetooth", 31, 1, 0), ("rds", 21, 5, 0), ("can", 29, 3, 1), ("xdp", 44, 3, 0),
            ("unspec", 0, 1, 0), ("ax25", 3, 2, 0), ("fam_45", 45, 1, 0), ("fam_huge", 1 << 20, 1, 0),
            ("netlink_generic", 16, 3, 16), ("netlink_netfilter", 16, 3, 12),
            ("netlink_audit", 16, 3, 9), ("netlink_uevent", 16, 3, 15), ("netlink_xfrm", 16, 3, 6),
            ("netlink_huge", 16, 3, 1 << 20)]:
        out[name] = sock(fam, typ, proto)
    out["pair_unix"] = pair(1)
    out["pair_vsock"] = pair(40)
    out["pair_tipc"] = pair(30)
    print(json.dumps(out))
elif cmd == "aio":
    nr = int(sys.argv[2])
    ctx = ctypes.c_ulong(0)
    r = libc.syscall(206, ctypes.c_uint(nr), ctypes.byref(ctx))  # io_setup
    print(err(r))
    if r == 0:
        if len(sys.argv) > 3:
            print("held", flush=True)
            time.sleep(float(sys.argv[3]))
        libc.syscall(207, ctx)  # io_destroy
elif cmd == "ptys":
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    fds = []
    while len(fds) < 4096:
        try:
            fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
        except OSError as e:
            print("refused", errno.errorcode[e.errno], flush=True)
            break
    print("held", len(fds), flush=True)
    time.sleep(float(sys.argv[2]))
elif cmd == "openpty":
    try:
        a, b = os.openpty()
        print("ok")
    except OSError as e:
        print(errno.errorcode[e.errno])
elif cmd == "tcpqueue":
    n, chunk = int(sys.argv[2]), b"x" * 65536
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(n + 8)
    conns, total = [], 0
    for i in range(n):
        c = socket.socket()
        c.connect(srv.getsockname())
        a, _ = srv.accept()
        c.setblocking(False)
        conns.append((c, a))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                total += c.send(chunk)
            except BlockingIOError:
                break
            except OSError as e:
                print("send", errno.errorcode.get(e.errno, e.errno))
                break
    print("queued", total)
elif cmd == "flags":
    for p in sys.argv[2:]:
        f = os.statvfs(p).f_flag
        print(p, "nosuid" if f & os.ST_NOSUID else "suid", "nodev" if f & os.ST_NODEV else "dev")
'''

IO_SETUP_NR = 206  # x86_64


@pytest.fixture(scope="module")
def probe_py(tmp_path_factory):
    p = tmp_path_factory.mktemp("shared") / "probe.py"
    p.write_text(PROBE)
    return str(p)


def host(probe_py, *args, timeout=60):
    p = subprocess.run([sys.executable, probe_py] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def install(s, thread, probe_py):
    with open(probe_py, "rb") as f:
        s.run("upload", "-t", thread, WS + "/p.py", input=f.read(), check=0)


def inside(s, thread, *args, timeout=60):
    r = s.sh(thread, "python3 %s/p.py %s" % (WS, " ".join(str(a) for a in args)), timeout=timeout)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def test_socket_families_are_an_allowlist(sbx, thread, probe_py):
    """AF_VSOCK is not network-namespaced: on a VM host it reaches the hypervisor's services.
    Only UNIX, INET, INET6 and NETLINK (routing, socket diagnostics) may be created; every other
    family is EAFNOSUPPORT (no module autoload either), other netlink protocols
    EPROTONOSUPPORT."""
    on_host = json.loads(host(probe_py, "families"))
    # positive control: the probe creates what the host kernel offers (vsock where the host has
    # it, generic netlink everywhere)
    assert on_host["netlink_generic"] == "ok" and on_host["unix"] == "ok", on_host
    install(sbx, thread, probe_py)
    got = json.loads(inside(sbx, thread, "families"))
    if on_host["vsock"] != "ok":
        print("host has no AF_VSOCK (%s): the vsock rows check the filter only" % on_host["vsock"])
    for name in ["unix", "inet", "inet6", "netlink_route", "netlink_sock_diag", "pair_unix"]:
        assert got[name] == "ok", (name, got)
    for name in ["vsock", "vsock_dgram", "packet", "key", "alg", "tipc", "bluetooth", "rds", "can",
                 "xdp", "unspec", "ax25", "fam_45", "fam_huge", "pair_vsock", "pair_tipc"]:
        assert got[name] == "EAFNOSUPPORT", (name, got)
    for name in ["netlink_generic", "netlink_netfilter", "netlink_audit", "netlink_uevent",
                 "netlink_xfrm", "netlink_huge"]:
        assert got[name] == "EPROTONOSUPPORT", (name, got)


def test_aio_is_not_available(sbx, thread, probe_py):
    """fs.aio-max-nr is one host-wide budget: io_setup(65536) in a sandbox made host root's
    io_setup(1) fail. Linux AIO is ENOSYS inside."""
    assert host(probe_py, "aio", 1).split() == ["ok"]  # positive control
    install(sbx, thread, probe_py)
    assert inside(sbx, thread, "aio", 1).split() == ["ENOSYS"]
    assert inside(sbx, thread, "aio", 65536).split() == ["ENOSYS"]
    assert host(probe_py, "aio", 1).split() == ["ok"]


def test_pty_pool_is_bounded(make_sbx, probe_py):
    """Every devpts instance but the host's draws from one pool (kernel.pty.max less
    kernel.pty.reserve): 3,071 opens of /dev/ptmx in one sandbox left neighbours without.
    A sandbox holds at most 128; a neighbour and the host still get theirs."""
    s = make_sbx()
    a, b = sbxsec.new_thread("ptys"), sbxsec.new_thread("neighbour")
    install(s, a, probe_py)
    install(s, b, probe_py)
    p = sbxsec.spawn_cli(s, "exec", "-t", a, "--", "python3 %s/p.py ptys 2" % WS,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = []
        while True:
            line = p.stdout.readline().decode()
            assert line, (out, p.stderr.read())
            out.append(line.split())
            if out[-1][0] == "held":
                break
        neighbour = inside(s, b, "openpty").split()
        on_host = host(probe_py, "openpty").split()
    finally:
        p.communicate(timeout=60)
    held = int(out[-1][1])
    print("ptys: one sandbox held %d, then %s" % (held, out[0]))
    assert held >= 16, out  # positive control: ptys can be opened inside
    assert held <= 128, "one sandbox held %d ptys" % held
    assert neighbour == ["ok"], neighbour
    assert on_host == ["ok"], on_host


@pytest.mark.parametrize("spares", [0, 1])
def test_user_data_and_volumes_are_nosuid_nodev(request, tmp_path, probe_py, spares):
    """Files a sandbox writes in its thread folder or a volume are owned by its host ids: the
    mounts are nosuid,nodev (exec stays: the workspace runs programs). Also through a spare."""
    vol = tmp_path / "vol"
    vol.mkdir()
    home = tmp_path / "home-flags"
    home.mkdir()
    cfg = tmp_path / "flags.yaml"  # a configured mount: sbxd's volumes arrive the same way
    cfg.write_text("sandbox:\n  spares: %d\n  mounts:\n    - host_path: %s\n"
                   "      container_path: /mnt/vol\n" % (spares, vol))
    s = sbxsec.Sbx(home, str(cfg))
    request.addfinalizer(s.down)
    t = sbxsec.new_thread("flags")
    if spares:
        s.sh(sbxsec.new_thread("warmup"), "true")  # leaves a spare to take
    install(s, t, probe_py)
    got = inside(s, t, "flags", "/mnt/user-data", WS, "/mnt/vol", "/tmp", "/usr").splitlines()
    flags = {l.split()[0]: l.split()[1:] for l in got}
    # positive control: the probe tells a nosuid,nodev mount (/tmp) from one without (/usr)
    assert flags["/tmp"] == ["nosuid", "nodev"] and flags["/usr"][0] == "suid", flags
    for p in ["/mnt/user-data", WS, "/mnt/vol"]:
        assert flags[p] == ["nosuid", "nodev"], (p, flags)
    r = s.sh(t, "cp /bin/true %s/t && %s/t && echo ran" % (WS, WS))
    assert r["stdout"] == "ran\n", r


def _cg_v1_memory():
    return os.path.exists(os.path.join(sbxsec.CG_ROOT, "memory", "memory.limit_in_bytes"))


def test_tcp_buffers_are_charged_to_the_sandbox(make_sbx, probe_py):
    """On cgroup v1 TCP buffers are outside memory.limit_in_bytes: with memory_mib 128, 110
    loopback connections queued 411 MiB. What a sandbox queues stays under its memory limit
    (v1: memory.kmem.tcp.limit_in_bytes; v2 charges socket memory to memory.max)."""
    mib = 128 if not sbxsec.SANITIZED else 768
    s = make_sbx(memory_mib=mib)
    t = sbxsec.new_thread("tcp")
    install(s, t, probe_py)
    out = inside(s, t, "tcpqueue", 110, timeout=180).split()
    queued = int(out[out.index("queued") + 1])
    print("tcp: 110 loopback connections queued %d MiB (memory limit %d MiB)" % (
        queued >> 20, mib))
    assert queued > 8 << 20, out  # positive control: the probe does queue
    assert queued < (mib << 20), "queued %d MiB outside a %d MiB sandbox" % (queued >> 20, mib)
    r = s.sh(t, "echo alive")
    assert r["stdout"] == "alive\n"


def test_file_table_share_is_bounded(sbx, thread):
    """fs.file-max is one table for the whole host: a sandbox's open-files hard limit of 524288
    let four of its processes take all of it on a small host (neighbours and the host: ENFILE).
    One process of a sandbox may hold at most 1/64 of it (at least 4096)."""
    with open("/proc/sys/fs/file-max") as f:
        file_max = int(f.read())
    r = sbx.sh(thread, "ulimit -Hn; ulimit -n")
    hard, soft = (int(x) for x in r["stdout"].split())
    # positive control: a command may raise its soft limit well above the 1024 it starts with
    r2 = sbx.sh(thread, "ulimit -n %d && ulimit -n" % hard)
    assert soft == 1024 and int(r2["stdout"]) == hard and hard >= 4096, (r, r2)
    assert hard <= max(4096, file_max // 64), "one process may hold %d of %d files" % (
        hard, file_max)


PIPES = r'''
import fcntl, os, resource, sys, time
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
def new_pipe():
    r, w = os.pipe()
    size = fcntl.fcntl(w, F_GETPIPE_SZ)
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        grow = "ok"
    except OSError as e:
        grow = os.strerror(e.errno)
    os.close(r); os.close(w)
    return size, grow
if sys.argv[1] == "hold":
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = [os.pipe() for _ in range(int(sys.argv[2]))]
    size, grow = new_pipe()
    print("held", len(held), size, grow, flush=True)
    time.sleep(float(sys.argv[3]))
else:
    print("pipe", *new_pipe())
'''


def uid_map_base(pid):
    with open("/proc/%d/uid_map" % pid) as f:
        inside, base, count = (int(x) for x in f.read().split())
    assert inside == 0 and count == 65536
    return base


def test_each_sandbox_has_host_ids_of_its_own(make_sbx, tmp_path):
    """All sandboxes ran as host uids 100000 + n: the kernel's per-user budgets were shared (a
    sandbox's 1,088 idle pipes shrank every other sandbox's new pipes), and a host user whose
    /etc/subuid covers 100000-165535 could enter every sandbox's id space. Each sandbox gets a
    range of its own, outside /etc/subuid and /etc/subgid, recorded in its metadata, locked for
    as long as it lives; its files in the thread folder keep the owner 100000 on disk."""
    s = make_sbx(pids=4096)
    a, b = sbxsec.new_thread("pipes"), sbxsec.new_thread("neighbour")
    s.run("upload", "-t", a, WS + "/pipes.py", input=PIPES.encode(), check=0)
    s.run("upload", "-t", b, WS + "/pipes.py", input=PIPES.encode(), check=0)
    pa, pb = sbxsec.sandbox_pid(s, a), sbxsec.sandbox_pid(s, b)
    base_a, base_b = uid_map_base(pa), uid_map_base(pb)
    assert base_a != base_b and abs(base_a - base_b) >= 65536, (base_a, base_b)
    metas = {}
    for d in os.listdir(os.path.join(s.home, "sandboxes")):
        with open(os.path.join(s.home, "sandboxes", d, "meta")) as f:
            m = json.load(f)
        metas[m.get("thread")] = m.get("uid_base")
    assert metas[a] == base_a and metas[b] == base_b, metas
    for base in (base_a, base_b):
        assert not (base < 165536 and base + 65536 > 100000), base  # Debian's first subuid range
    # a thread's files keep their on-disk owner whatever range its sandbox had
    s.sh(a, "echo x > %s/mine" % WS)
    st = os.stat(os.path.join(sbxsec.thread_dir(s, a), "workspace", "mine"))
    assert (st.st_uid, st.st_gid) == (100000, 100000), st
    # the per-user pipe budget (fs.pipe-user-pages-soft): the attacker exhausts its own ...
    with open("/proc/sys/fs/pipe-user-pages-soft") as f:
        soft_pages = int(f.read())
    n = soft_pages // 16 + 64
    p = sbxsec.spawn_cli(s, "exec", "-t", a, "--", "python3 %s/pipes.py hold %d 3" % (WS, n),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline().decode().split()
        assert line and line[0] == "held", (line, p.stderr.read())
        neighbour = s.sh(b, "python3 %s/pipes.py probe" % WS)["stdout"].split()
    finally:
        p.communicate(timeout=60)
    print("pipes: attacker held %s, its next pipe %s B (%s); neighbour's %s B (%s)" % (
        line[1], line[2], line[3], neighbour[1], neighbour[2]))
    # positive control: the budget is reached (the attacker's own new pipe is shrunk)
    assert int(line[2]) < 65536 and line[3] != "ok", line
    assert neighbour[1:] == ["65536", "ok"], neighbour


def test_id_ranges_avoid_subuid_and_are_freed_with_the_sandbox(tmp_path):
    """A range never overlaps an /etc/subuid or /etc/subgid entry (here one covering half of the
    ranges' space, bound over the host's file in a private mount namespace), and is taken until
    the sandbox is gone."""
    lo, half = 0x10000000, 0x18000000
    sub = tmp_path / "subuid"
    sub.write_text("alice:%d:%d\n" % (lo, half))
    home = tmp_path / "home-ids"
    home.mkdir()
    s = sbxsec.Sbx(home)
    script = ("mount --bind %s /etc/subuid && mount --bind %s /etc/subgid && exec \"$@\"" %
              (sub, sub))
    bases = []
    try:
        for i in range(4):
            t = sbxsec.new_thread("ids")
            p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                "sh"] + s.cmd("exec", "-t", t, "--", "true"),
                               capture_output=True, timeout=60)
            assert p.returncode == 0, p.stderr
            bases.append(uid_map_base(sbxsec.sandbox_pid(s, t)))
        assert all(b >= lo + half for b in bases), [hex(b) for b in bases]
        # positive control: the slot of a live sandbox is locked; freed once it is removed
        slot = "/run/sbx/id-ranges/%d" % bases[-1]
        fd = os.open(slot, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            s.down()
            for _ in range(50):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(0.1)
            else:
                pytest.fail("the range of a destroyed sandbox stays taken")
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        s.down()


def test_spares_take_ranges_too(request, tmp_path):
    """A spare adopted for a thread keeps its own range; the thread's files are the thread's."""
    home = tmp_path / "home-spares"
    home.mkdir()
    cfg = sbxsec.write_config(tmp_path / "spares.yaml", spares=1)
    s = sbxsec.Sbx(home, cfg)
    request.addfinalizer(s.down)
    s.sh(sbxsec.new_thread("warm"), "true")
    for _ in range(100):  # the detached filler makes the spare
        if len(os.listdir(os.path.join(s.home, "sandboxes"))) >= 2:
            break
        time.sleep(0.1)
    t = sbxsec.new_thread("adopted")
    r = s.sh(t, "echo x > %s/f && stat -c '%%u %%g' %s/f && cat /proc/self/uid_map" % (WS, WS))
    out = r["stdout"].split()
    assert out[:2] == ["0", "0"] and out[2] == "0" and int(out[3]) >= 0x10000000, r
    st = os.stat(os.path.join(sbxsec.thread_dir(s, t), "workspace", "f"))
    assert (st.st_uid, st.st_gid) == (100000, 100000)
