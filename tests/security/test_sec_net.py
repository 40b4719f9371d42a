"""The host's network from inside a sandbox (docs/security.md, "Network"): loopback ports,
abstract and pathname unix sockets, other sandboxes. Each test fails if a connection works."""
import os
import socket
import threading

import pytest

import sbxsec


class Listener:
    """Host listeners that record every connection or datagram they get."""

    def __init__(self):
        self.hits = []
        self.socks = []
        self._stop = threading.Event()

    def tcp(self, family, addr):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((addr, 0))
        s.listen(16)
        self._serve(s, stream=True)
        return s.getsockname()[1]

    def udp(self, family, addr):
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.bind((addr, 0))
        self._serve(s, stream=False)
        return s.getsockname()[1]

    def unix(self, name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(name)
        s.listen(16)
        self._serve(s, stream=True)

    def _serve(self, s, stream):
        s.settimeout(0.2)
        self.socks.append(s)

        def loop():
            while not self._stop.is_set():
                try:
                    if stream:
                        c, peer = s.accept()
                        self.hits.append(("accept", s.getsockname(), peer))
                        c.close()
                    else:
                        data, peer = s.recvfrom(64)
                        self.hits.append(("datagram", s.getsockname(), peer))
                        s.sendto(data, peer)
                except (socket.timeout, OSError):
                    pass

        threading.Thread(target=loop, daemon=True).start()

    def close(self):
        self._stop.set()
        for s in self.socks:
            s.close()


@pytest.fixture
def listener():
    l = Listener()
    yield l
    l.close()


def host_ip():
    """The host's primary address (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()


def test_only_a_private_loopback(sbx, prober, thread):
    res, r = prober.run(thread, "netdev")
    devs = [l.split()[1] for l in r["stdout"].splitlines() if l.startswith("netdev ")]
    assert devs == ["lo"], devs
    for k in ("socket_raw_icmp", "socket_packet", "siocsifmtu_lo"):
        assert res[k] != "ok", (k, res[k])


def test_host_tcp_and_udp_ports_unreachable(sbx, prober, thread, listener):
    targets = [("127.0.0.1", listener.tcp(socket.AF_INET, "127.0.0.1")),
               ("127.0.0.1", listener.tcp(socket.AF_INET, "0.0.0.0"))]
    try:
        targets.append(("::1", listener.tcp(socket.AF_INET6, "::1")))
    except OSError:
        pass
    ip = host_ip()
    if ip:
        targets.append((ip, listener.tcp(socket.AF_INET, ip)))
    for host, port in targets:
        res, _ = prober.run(thread, "connect_tcp", host, port)
        assert res["connect_tcp"] != "ok", (host, port)
    uport = listener.udp(socket.AF_INET, "127.0.0.1")
    res, _ = prober.run(thread, "connect_udp", "127.0.0.1", uport)
    assert res["udp_echo"] == "none"
    assert listener.hits == []


def test_host_unix_sockets_unreachable(sbx, prober, thread, listener, tmp_path):
    abstract = "sbx-sec-abstract-%d" % os.getpid()
    listener.unix("\0" + abstract)
    path = str(tmp_path / "host.sock")
    listener.unix(path)
    tmp_path_sock = "/tmp/sbx-sec-host-%d.sock" % os.getpid()
    try:
        listener.unix(tmp_path_sock)
        for target in ("@" + abstract, path, tmp_path_sock):
            res, _ = prober.run(thread, "connect_unix", target)
            assert res["connect_unix"] != "ok", target
        # the host's own well-known abstract sockets (whatever this host has) are out of reach
        with open("/proc/net/unix") as f:
            names = [l.split()[-1] for l in f.readlines()[1:] if l.split()[-1].startswith("@")]
        for name in names[:20]:
            res, _ = prober.run(thread, "connect_unix", name)
            assert res["connect_unix"] != "ok", name
    finally:
        os.unlink(tmp_path_sock)
    assert listener.hits == []


def test_sandboxes_cannot_reach_each_other(sbx, prober):
    a, b = sbxsec.new_thread("a"), sbxsec.new_thread("b")
    sbx.sh(a, "python3 -c \"import socket,time\n"
           "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('127.0.0.1', 18080)); s.listen(); time.sleep(30)\" >/dev/null 2>&1 &"
           "sleep 0.5; echo up")
    res, _ = prober.run(a, "connect_tcp", "127.0.0.1", 18080)
    assert res["connect_tcp"] == "ok"  # the listener is up in its own sandbox
    res, _ = prober.run(b, "connect_tcp", "127.0.0.1", 18080)
    assert res["connect_tcp"] != "ok"


def test_fd_passing_stays_inside(sbx, prober, thread):
    """Descriptors passed between sandbox processes over unix sockets give nothing beyond the
    sandbox: climbing from a passed root fd ends at the same root; a passed user-namespace fd
    cannot be entered."""
    res, _ = prober.run(thread, "fdpass")
    assert res["recv_root_fd"] == "ok" and res["climb_same_root"] == "1"
    assert res["setns_passed_userns"] != "ok"
