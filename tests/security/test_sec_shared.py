"""Host-wide kernel budgets and surfaces that namespaces do not split (docs/security.md, "Shared
kernel budgets"): socket families (AF_VSOCK reaches the VM host), Linux AIO (fs.aio-max-nr), the
pseudo-terminal pool, TCP buffer memory on cgroup v1, the host's file table, and the mount flags
of the folders a sandbox writes for the host. Each test runs its probe on the host (or in a
state the fix does not change) first: the positive control that the probe can succeed."""
import json
import os
import subprocess
import sys

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
