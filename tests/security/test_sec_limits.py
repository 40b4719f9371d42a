"""Clients that try to take the whole host (docs/security.md, "A client that floods"): sbxd's
connections (a per-address limit, a deadline for a request head, a reserve for requests that
arrive whole) and its sandboxes (sandbox.max_sandboxes, max_sandboxes_per_user and memory
admission, answered with 429 in every face and refused by the CLI).

Each test has its positive control: with the limit turned off in the same test, the attack
works (the other client is starved, the slow head stays open, the extra sandbox is made)."""
import http.client
import json
import os
import socket
import subprocess
import threading
import time

import pytest

import sbxsec
from test_sec_sbxd import KEY, Daemon, sbxd_factory, wait_for  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not os.path.exists(sbxsec.SBXD),
                                reason="%s is not built" % sbxsec.SBXD)

OTHER = "127.0.0.2"  # the other client's address (all of 127/8 is loopback)


def conn_config(per_address, reserve, head_timeout=0, total=64):
    return ("sbxd:\n  max_connections: %d\n  max_connections_per_address: %d\n"
            "  connections_reserve: %d\n  head_timeout: %s\n"
            % (total, per_address, reserve, head_timeout))


def flood(port, n):
    """n idle TCP connections from 127.0.0.1 (nothing sent)."""
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    return socks


def cut_count(socks):
    """How many of socks the server closed."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                n += 1
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def from_other(d, method, path, key=None, timeout=5, source=OTHER):
    """The status of one request from source (127.0.0.2), or None if it was not answered."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout,
                                   source_address=(source, 0))
    try:
        c.request(method, path, headers={"OPEN-SANDBOX-API-KEY": key} if key else {})
        r = c.getresponse()
        r.read()
        return r.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        c.close()


def other_served(d):
    return (from_other(d, "GET", "/health"), from_other(d, "GET", "/v1/sandboxes", key=KEY))


@pytest.fixture
def loopback2():
    try:
        s = socket.socket()
        s.bind((OTHER, 0))
        s.close()
    except OSError as e:
        pytest.skip("cannot bind %s: %s" % (OTHER, e))


# ---- connections ----

def test_sbxd_flood_from_one_address_leaves_others_served(sbxd_factory, loopback2):
    """200 idle connections from 127.0.0.1: with sbxd.max_connections_per_address 16 it holds
    16 (each one more evicts its own oldest idle one), a client on 127.0.0.2 gets /health and an
    authenticated call through, and so does a whole request from 127.0.0.1 itself (it evicts
    one of the flood). Positive control: with no per-address limit (and no reserve), the same
    flood takes all 64 places and the other client is not answered."""
    d = sbxd_factory("limited", key=KEY, config=conn_config(per_address=16, reserve=0))
    socks = flood(d.port, 200)
    try:
        time.sleep(1)
        assert other_served(d) == (200, 200)
        assert from_other(d, "GET", "/health", source="127.0.0.1") == 200
        assert wait_for(lambda: cut_count(socks) >= 200 - 16, timeout=10), cut_count(socks)
    finally:
        for s in socks:
            s.close()
    d.assert_healthy()

    d = sbxd_factory("open", key=KEY, config=conn_config(per_address=0, reserve=0))
    threads0 = d.threads()
    socks = flood(d.port, 100)
    try:
        # every one of the 64 places holds a connection (a thread each)
        assert wait_for(lambda: d.threads() >= threads0 + 60, timeout=10), d.threads()
        assert other_served(d) == (None, None), "the flood did not starve the other client"
    finally:
        for s in socks:
            s.close()
    assert wait_for(lambda: from_other(d, "GET", "/health") == 200, timeout=15)


def test_sbxd_streams_count_against_the_address_limit(sbxd_factory, loopback2):
    """max_connections_per_address 2, head_timeout 2: two event streams of 5 s from 127.0.0.1
    run to their end (a head that is in is not timed), and while they run a third connection
    from 127.0.0.1 is refused (nothing of its address is idle to give way) while 127.0.0.2 is
    served."""
    d = sbxd_factory(key=KEY, config=conn_config(per_address=2, reserve=0, head_timeout=2))
    box = d.create()
    results = []

    def stream():
        results.append(box.sh("sleep 5; echo streamed", timeout=60))

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(2.5)  # both streams are running, and past the head deadline
        assert from_other(d, "GET", "/health", source="127.0.0.1") is None
        assert from_other(d, "GET", "/health") == 200
    finally:
        for t in threads:
            t.join(60)
    assert results == [(["streamed"], 0)] * 2
    assert wait_for(lambda: from_other(d, "GET", "/health", source="127.0.0.1") == 200)
    d.assert_healthy()


def _ws_frame(text):
    """A masked client text frame (short)."""
    data = text.encode()
    mask = os.urandom(4)
    return (bytes([0x81, 0x80 | len(data)]) + mask +
            bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def _ws_read(sock, want, timeout=20):
    """Reads server frames until the output (binary 0x01 frames) holds want; the output."""
    buf, out = b"", b""
    end = time.monotonic() + timeout
    sock.settimeout(2)
    while want not in out and time.monotonic() < end:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        buf += d
        while len(buf) >= 2:
            n, at = buf[1] & 0x7f, 2
            if n == 126:
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < at + n:
                break
            payload, buf = buf[at:at + n], buf[at + n:]
            if payload[:1] == b"\x01":
                out += payload[1:]
    return out


def test_sbxd_websocket_outlives_the_head_deadline(sbxd_factory):
    """head_timeout 2: a PTY WebSocket left idle for 4 s after its 101 still carries input and
    output (the upgraded socket is no longer timed as a head)."""
    d = sbxd_factory(key=KEY, config=conn_config(per_address=0, reserve=0, head_timeout=2))
    box = d.create()
    r = box.req("POST", "/pty", {"command": "read l; echo got-$l; sleep 2"})
    assert r.status == 201, r
    sid = r.json()["session_id"]
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    try:
        s.sendall(("GET %s/pty/%s/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n%s: %s\r\n\r\n"
                   % (box.prefix, sid, "X-EXECD-ACCESS-TOKEN", box.token)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            d_ = s.recv(1)
            assert d_, head
            head += d_
        assert head.startswith(b"HTTP/1.1 101"), head
        time.sleep(4)
        s.sendall(_ws_frame(json.dumps({"type": "stdin", "data": "x\n"})))
        assert b"got-x" in _ws_read(s, b"got-x")
    finally:
        s.close()
    d.assert_healthy()


def test_sbxd_reserve_keeps_room_for_whole_requests(sbxd_factory, loopback2):
    """No per-address limit, 64 places of which 16 are reserved: 100 idle connections (from any
    addresses, here one) may hold 48; each one more evicts the one that waited longest, so
    /health and an authenticated call from another client are still answered."""
    d = sbxd_factory(key=KEY, config=conn_config(per_address=0, reserve=16))
    socks = flood(d.port, 100)
    try:
        time.sleep(1)
        assert other_served(d) == (200, 200)
        assert wait_for(lambda: cut_count(socks) >= 100 - 48, timeout=10), cut_count(socks)
    finally:
        for s in socks:
            s.close()
    d.assert_healthy()


def _slow_head(port, seconds):
    """Drips a request head a byte every 0.2 s: the seconds until sbxd closed the connection,
    or None if it was still open after `seconds`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.monotonic()
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        while time.monotonic() - t0 < seconds:
            try:
                s.sendall(b"X-a: b\r\n"[:1])
            except OSError:
                return time.monotonic() - t0
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    return time.monotonic() - t0
            except BlockingIOError:
                pass
            except OSError:
                return time.monotonic() - t0
            s.setblocking(True)
            time.sleep(0.2)
        return None
    finally:
        s.close()


def test_sbxd_slow_head_is_cut_streams_are_not(sbxd_factory):
    """sbxd.head_timeout 2: a head dripped a byte at a time is cut (MHD's own timeout, one of
    inactivity, never fires for it); a command's event stream that lasts longer than the
    deadline is not cut (its head was whole). Positive control: head_timeout 0 leaves the
    dripping connection open."""
    d = sbxd_factory("deadline", key=KEY, config=conn_config(per_address=0, reserve=0,
                                                             head_timeout=2))
    secs = _slow_head(d.port, 20)
    assert secs is not None, "a slow head was not cut in 20 s"
    assert secs >= 1.5, secs
    box = d.create()
    out, code = box.sh("sleep 4; echo streamed")
    assert (out, code) == (["streamed"], 0)
    d.assert_healthy()

    d = sbxd_factory("nodeadline", key=KEY, config=conn_config(per_address=0, reserve=0,
                                                               head_timeout=0))
    assert _slow_head(d.port, 6) is None, "the slow head was cut without a head_timeout"


def test_sbxd_bad_connection_limits_refused(tmp_path):
    """A reserve that is not below max_connections is refused at start, with a clear line."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(conn_config(per_address=0, reserve=64, total=64))
    p = subprocess.run([sbxsec.SBXD, "--listen", "127.0.0.1:0", "--home", str(tmp_path / "h"),
                        "--config", str(cfg)], capture_output=True, timeout=60)
    assert p.returncode != 0
    assert b"sbxd.connections_reserve (64) must be less than sbxd.max_connections (64)" in (
        p.stdout + p.stderr)


# ---- sandboxes ----

def _sbx(d, *args, config=None, input=None):
    argv = [sbxsec.SBX, "--home", d.home]
    if config:
        argv += ["--config", config]
    return subprocess.run(argv + list(args), capture_output=True, timeout=120, input=input)


def _mcp_call(d, config, thread):
    """One execute_command through `sbx mcp` (stdio) in d's home: the tool result."""
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "execute_command", "arguments": {"command": "echo hi"}}}]
    p = subprocess.Popen([sbxsec.SBX, "--home", d.home, "--config", config, "mcp", "-t", thread],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        for m in msgs:
            p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()
        for line in p.stdout:  # stdin stays open until the call is answered
            reply = json.loads(line)
            if reply.get("id") == 2:
                return reply["result"]
        raise AssertionError("sbx mcp ended without answering the call")
    finally:
        p.stdin.close()
        p.wait(60)


PROV = "prov-key-limits"


def test_sandbox_caps_are_429_in_every_face(sbxd_factory, tmp_path):
    """sandbox.max_sandboxes 2: the third live sandbox is refused in every face, counted across
    every process sharing the home (sbxd and the CLI): the lifecycle API and the provisioner
    (DeerFlow's, and so the AIO face) answer 429, the contract API 429, MCP a tool error that
    says so, the CLI exits 1 with the message. Destroying one makes room again. Positive
    control: with max_sandboxes 0 the third create succeeds."""
    state = tmp_path / "deer-flow"
    (state / "threads").mkdir(parents=True)
    env = {"PROVISIONER_API_KEY": PROV, "THREADS_HOST_PATH": str(state / "threads"),
           "DEER_FLOW_HOST_BASE_DIR": str(state)}
    yaml = "sandbox:\n  max_sandboxes: 2\n  max_sandboxes_per_user: 0\n"
    d = sbxd_factory("capped", key=KEY, config=yaml, env=env)
    cfg = str(tmp_path / "capped.yaml")
    a = d.create()
    # a second live sandbox, made by another process (the CLI) in the same home
    p = _sbx(d, "exec", "-t", "cli-one", "true", config=cfg)
    assert p.returncode == 0, p.stderr

    body = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "1", "memory": "256Mi"}, "timeout": 600}
    locks = set(os.listdir(os.path.join(d.home, "locks")))
    for _ in range(5):
        r = d.req("POST", "/v1/sandboxes", body)
        assert r.status == 429, r
        assert r.code() == "SANDBOX::LIMIT_EXCEEDED"
        assert "sandbox.max_sandboxes is 2" in r.body.decode()
    # a refused create leaves nothing behind, not even its lock file
    assert set(os.listdir(os.path.join(d.home, "locks"))) == locks
    r = d.req("POST", "/api/sandboxes", {"sandbox_id": "p1", "thread_id": "t-p1"}, key=None,
              headers={"X-API-Key": PROV})
    assert r.status == 429, r
    assert "sandbox limit reached" in r.json()["detail"]
    r = d.req("POST", "/v1/contract/acquire", {"user": "u1", "thread": "t1"})
    assert r.status == 429, r
    res = _mcp_call(d, cfg, "mcp-one")
    assert res["isError"] is True and "sandbox limit reached" in res["content"][0]["text"], res
    p = _sbx(d, "exec", "-t", "cli-two", "true", config=cfg)
    assert p.returncode == 1 and b"sbx: " in p.stderr and b"sandbox.max_sandboxes is 2" in p.stderr
    assert len(d.ids()) == 1
    assert len(d.ps()) == 2

    # room again once one is gone
    assert d.req("DELETE", "/v1/sandboxes/%s" % a.id).status == 204
    assert wait_for(lambda: len(d.ps()) == 1, timeout=30)
    r = d.req("POST", "/api/sandboxes", {"sandbox_id": "p1", "thread_id": "t-p1"}, key=None,
              headers={"X-API-Key": PROV})
    assert r.status == 200, r

    # positive control: no cap, the same third create is made
    d2 = sbxd_factory("uncapped", key=KEY, config="sandbox:\n  max_sandboxes: 0\n")
    for _ in range(3):
        d2.create()
    assert len(d2.ids()) == 3


def test_sandbox_cap_per_user(sbxd_factory):
    """sandbox.max_sandboxes_per_user 1: alice's second thread is refused (429), bob still gets
    one; with no per-user cap alice gets both."""
    d = sbxd_factory("peruser", key=KEY, config="sandbox:\n  max_sandboxes_per_user: 1\n")
    acq = lambda u, t: d.req("POST", "/v1/contract/acquire", {"user": u, "thread": t})
    assert acq("alice", "t1").status == 200
    r = acq("alice", "t2")
    assert r.status == 429 and "user `alice`" in r.body.decode(), r
    assert acq("bob", "t1").status == 200
    d2 = sbxd_factory("nouser", key=KEY, config="sandbox:\n  max_sandboxes_per_user: 0\n")
    assert d2.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t1"}).status == 200
    assert d2.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t2"}).status == 200


def _mem_total_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) >> 10
    raise AssertionError("no MemTotal")


def test_memory_admission_refuses_more_than_the_host_has(sbxd_factory, tmp_path):
    """A sandbox whose memory limit is twice the host's RAM is refused (429, and exit 1 from
    the CLI, which reads sandbox.memory_mib) under memory_overcommit 1; one within it is made.
    Positive control: memory_overcommit 0 (no admission) makes the same sandbox."""
    big = 2 * _mem_total_mib()
    d = sbxd_factory("mem", key=KEY, config="sandbox:\n  memory_overcommit: 1\n")
    body = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "1", "memory": "%dMi" % big}, "timeout": 600}
    r = d.req("POST", "/v1/sandboxes", body)
    assert r.status == 429, r
    assert "not enough memory" in r.body.decode() and "memory_overcommit" in r.body.decode()
    assert d.ids() == []
    d.create(resourceLimits={"cpu": "1", "memory": "256Mi"})
    cfg = tmp_path / "big.yaml"
    cfg.write_text("sandbox:\n  memory_overcommit: 1\n  memory_mib: %d\n" % big)
    p = _sbx(d, "exec", "-t", "big", "true", config=str(cfg))
    assert p.returncode == 1 and b"not enough memory" in p.stderr, p.stderr
    # the live sandbox counts with the limit it was made with, not this configuration's
    assert b"limits add up to 256 MiB" in p.stderr, p.stderr

    d2 = sbxd_factory("nomem", key=KEY, config="sandbox:\n  memory_overcommit: 0\n")
    r = d2.req("POST", "/v1/sandboxes", body)
    assert r.status == 202, r


def test_sandbox_cap_holds_for_racing_processes(tmp_path):
    """Eight CLI processes create a sandbox each at once in one home with max_sandboxes 3:
    exactly three are made (the count is taken under the home's pool lock), the others exit 1
    with the limit's message; `sbx ps` shows three."""
    home = str(tmp_path / "home")
    cfg = tmp_path / "c.yaml"
    # replicas above the cap: the soft cap would otherwise evict a warm one to make room
    cfg.write_text("sandbox:\n  max_sandboxes: 3\n  max_sandboxes_per_user: 0\n"
                   "  replicas: 100\n")
    base = [sbxsec.SBX, "--home", home, "--config", str(cfg)]
    try:
        procs = [subprocess.Popen(base + ["exec", "-t", "race-%d" % i, "true"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for i in range(8)]
        done = [(p.wait(180), p.stderr.read()) for p in procs]
        ok = [e for rc, e in done if rc == 0]
        refused = [e for rc, e in done if rc == 1 and b"sandbox.max_sandboxes is 3" in e]
        assert (len(ok), len(refused)) == (3, 5), done
        p = subprocess.run(base + ["ps", "--json"], capture_output=True, timeout=60)
        assert len(json.loads(p.stdout)["sandboxes"]) == 3
    finally:
        subprocess.run(base + ["down"], capture_output=True, timeout=120)
