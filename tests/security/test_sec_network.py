"""Escapes from an egress sandbox's policy (sandbox.network egress, docs/network.md): root inside
changing routes or the packet filter, raw sockets, its own resolver, DNS rebinding. The rules
live in the sandbox's network namespace, which the host's user namespace owns: root inside has
no capability over it. Each test has a positive control (what must work does) and fails if the
escape works. The fake internet is tests/integration/fakenet.py's."""
import importlib.util
import os
import shlex

import pytest

import sbxsec

_spec = importlib.util.spec_from_file_location(
    "sbx_fakenet", os.path.join(sbxsec.SOURCE, "tests", "integration", "fakenet.py"))
fakenet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakenet)

pytestmark = pytest.mark.skipif(not fakenet.available(), reason="needs root, pasta, nft, ip")


@pytest.fixture(scope="module")
def net():
    n = fakenet.FakeNet()
    yield n
    n.close()


class NetSbx(sbxsec.Sbx):
    def __init__(self, home, config, net):
        super().__init__(home, config)
        self.net = net

    def cmd(self, *args):
        return self.net.wrap(super().cmd(*args))


@pytest.fixture
def box(tmp_path, net):
    """A sandbox allowed pypi.test and rebind.test / hostaddr.test (names answering a private
    and a host address), everything else denied."""
    cfg = tmp_path / "net.yaml"
    cfg.write_text("sandbox:\n  network: egress\n  network_policy:\n    defaultAction: deny\n"
                   "    egress:\n"
                   "      - {action: allow, target: pypi.test}\n"
                   "      - {action: allow, target: rebind.test}\n"
                   "      - {action: allow, target: hostaddr.test}\n")
    s = NetSbx(tmp_path / "home", str(cfg), net)
    yield s
    s.down()


def curl(url, name):
    return "curl -s -m 3 -o /dev/null %s && echo %s=ok || echo %s=fail" % (url, name, name)


def run(s, script):
    r = s.sh("t", script, timeout=120)
    return r["stdout"] + r["stderr"]


def test_root_cannot_change_routes_or_addresses(box):
    out = run(box, "; ".join([
        curl("http://pypi.test:8080/", "control"),
        "ip route show default | grep -q eth0 && echo route=present",
        "ip route del default && echo del=worked || echo del=refused",
        "ip route add 203.0.113.0/24 dev eth0 && echo add=worked || echo add=refused",
        "ip addr add 10.9.9.9/32 dev eth0 && echo addr=worked || echo addr=refused",
        "ip link set eth0 down && echo down=worked || echo down=refused",
        "ip link add x0 type veth peer name x1 && echo veth=worked || echo veth=refused",
        curl("http://pypi.test:8080/", "after")]))
    assert "control=ok" in out and "route=present" in out, out
    for k in ("del", "add", "addr", "down", "veth"):
        assert k + "=refused" in out, out
    assert "after=ok" in out, out


def test_root_cannot_change_the_packet_filter(box):
    out = run(box, "; ".join([
        curl("http://203.0.113.40:8080/", "control"),
        "nft flush ruleset && echo flush=worked || echo flush=refused",
        "nft add rule inet sbx out accept && echo rule=worked || echo rule=refused",
        "nft list ruleset >/dev/null 2>&1 && echo list=worked || echo list=refused",
        "iptables -P OUTPUT ACCEPT 2>/dev/null && echo ipt=worked || echo ipt=refused",
        "echo 1 > /proc/sys/net/ipv4/ip_forward && echo sysctl=worked || echo sysctl=refused",
        curl("http://203.0.113.40:8080/", "after")]))
    # the control: a literal address no rule allows is unreachable
    assert "control=fail" in out, out
    for k in ("flush", "rule", "list", "ipt", "sysctl"):
        assert k + "=refused" in out, out
    assert "after=fail" in out, out


def test_no_raw_or_packet_sockets(box):
    script = ("import socket\n"
              "s=socket.socket(socket.AF_INET,socket.SOCK_STREAM); s.settimeout(3)\n"
              "s.connect(('203.0.113.10',8080)); print('control=ok')\n"
              "for name,args in (('raw',(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_UDP)),\n"
              "                  ('icmp',(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_ICMP)),\n"
              "                  ('packet',(socket.AF_PACKET,socket.SOCK_RAW,0))):\n"
              "  try:\n"
              "    socket.socket(*args); print(name+'=worked')\n"
              "  except OSError as e: print(name+'=refused', e)\n")
    # ahostsv4: the A answer is what pins 203.0.113.10 (pypi.test has an AAAA too)
    out = run(box, "getent ahostsv4 pypi.test >/dev/null; python3 -c %s" % shlex.quote(script))
    assert "control=ok" in out, out
    for k in ("raw", "icmp", "packet"):
        assert k + "=refused" in out, out


def test_own_resolver_and_port_53_elsewhere(box):
    script = ("import socket,struct\n"
              "q=struct.pack('!HHHHHH',9,256,1,0,0,0)+b'\\x04pypi\\x04test\\x00'+struct.pack('!HH',1,1)\n"
              "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(2)\n"
              "s.sendto(q,('127.0.0.53',53)); s.recv(512); print('control=ok')\n"
              "b=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              "try:\n"
              "  b.bind(('127.0.0.53',53)); print('squat=worked')\n"
              "except OSError as e: print('squat=refused', e)\n"
              "for port in (53, 853):\n"
              "  u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(2)\n"
              "  try:\n"
              "    u.sendto(q,('203.0.113.53',port)); u.recv(512); print('up%d=worked' % port)\n"
              "  except OSError as e: print('up%d=refused' % port, e)\n")
    out = run(box, "python3 -c %s" % shlex.quote(script))
    assert "control=ok" in out, out
    assert "squat=refused" in out and "up53=refused" in out and "up853=refused" in out, out


def test_dns_rebinding_to_private_or_host_addresses(box):
    out = run(box, "; ".join([
        curl("http://pypi.test:8080/", "control"),
        "getent ahosts rebind.test; getent ahosts hostaddr.test",
        curl("http://rebind.test:8080/", "private"),
        curl("http://10.77.0.1:8080/", "private_ip"),
        curl("http://hostaddr.test:8080/", "host"),
        curl("http://%s:8080/" % fakenet.HOST_ADDR, "host_ip"),
        # the same over IPv6 (AAAA answers: a ULA, a host address)
        curl("-6 http://rebind.test:8080/", "private6"),
        curl("http://[fd00::10]:8080/", "private6_ip"),
        curl("-6 http://hostaddr.test:8080/", "host6"),
        curl("http://[%s]:8080/" % fakenet.HOST_ADDR6, "host6_ip")]))
    assert "control=ok" in out, out
    # the names resolve (the answer passes) but their addresses were never pinned
    for a in ("10.77.0.1", fakenet.HOST_ADDR, "fd00::10", fakenet.HOST_ADDR6):
        assert a in out, (a, out)
    for k in ("private", "private_ip", "host", "host_ip", "private6", "private6_ip", "host6",
              "host6_ip"):
        assert k + "=fail" in out, out
