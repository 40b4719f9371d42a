"""Escapes from an egress sandbox's policy (sandbox.network egress, docs/network.md): root inside
changing routes or the packet filter, raw sockets, its own resolver, DNS rebinding. The rules
live in the sandbox's network namespace, which the host's user namespace owns: root inside has
no capability over it. Each test has a positive control (what must work does) and fails if the
escape works. The fake internet is tests/integration/fakenet.py's."""
import glob
import importlib.util
import json
import os
import re
import shlex
import subprocess
import time

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


class NetSbx(fakenet.Wrapped, sbxsec.Sbx):
    pass


# Every escape runs twice: as root, and as an ordinary user (rootless egress: the rules sit in
# a network namespace of the sandbox's outer user namespace, the sandbox's root one further in)
_rl_spec = importlib.util.spec_from_file_location(
    "sbx_test_rootless_net", os.path.join(sbxsec.SOURCE, "tests", "integration", "test_rootless.py"))
_rl = importlib.util.module_from_spec(_rl_spec)
_rl_spec.loader.exec_module(_rl)
bindir = _rl.bindir  # the fixtures: a user with subordinate ids and its copy of sbx
user = _rl.user


def _box(request, tmp_path, net, text):
    u = request.getfixturevalue("user") if request.param == "rootless" else None
    top = fakenet.folder(tmp_path, u, "sec")
    return NetSbx(os.path.join(top, "home"), fakenet.write_config(top, "net.yaml", text, u), net,
                  u)


@pytest.fixture(params=["root", "rootless"])
def box(request, tmp_path, net):
    """A sandbox allowed pypi.test and rebind.test / hostaddr.test (names answering a private
    and a host address), everything else denied."""
    s = _box(request, tmp_path, net,
             "sandbox:\n  network: egress\n  network_policy:\n    defaultAction: deny\n"
             "    egress:\n"
             "      - {action: allow, target: pypi.test}\n"
             "      - {action: allow, target: rebind.test}\n"
             "      - {action: allow, target: hostaddr.test}\n")
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


# ---- the TCP relay (src/net/tcpproxy.c): TCP leaves through the enforcer, from the host ----

def enforcer_pid(s):
    recs = glob.glob(os.path.join(str(s.home), "sandboxes", "*", "net", "enforcer"))
    assert len(recs) == 1, recs
    with open(recs[0]) as f:
        return int(re.search(r"pid=(\d+)", f.read()).group(1)), os.path.dirname(recs[0])


def denied(netdir, pred):
    deadline = time.monotonic() + 3
    while True:
        with open(os.path.join(netdir, "denied.log")) as f:
            log = [json.loads(line) for line in f]
        if any(pred(e) for e in log) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


DIRECT = r"""
import socket
found = 0
for path, fam, lo in (('/proc/net/tcp', socket.AF_INET, '0100007F'),
                      ('/proc/net/tcp6', socket.AF_INET6, '00000000000000000000000001000000')):
    try:
        lines = open(path).read().split('\n')[1:]
    except OSError:
        continue
    for l in lines:
        f = l.split()
        if len(f) < 4 or f[3] != '0A' or f[1].split(':')[0] != lo:
            continue
        port = int(f[1].split(':')[1], 16)
        found += 1
        c = socket.socket(fam, socket.SOCK_STREAM); c.settimeout(3)
        try:
            c.connect(('127.0.0.1' if fam == socket.AF_INET else '::1', port))
            c.sendall(b'GET / HTTP/1.0\r\n\r\n')
            d = c.recv(100)
            print('direct%d=%s' % (port, 'answered' if d else 'refused'))
        except OSError as e:
            print('direct%d=refused' % port, e)
print('listeners=%d' % found)
"""


def test_relay_refuses_direct_connections(box):
    # the relay listens on the sandbox's loopback, where anything inside can find it
    out = run(box, "%s; python3 -c %s" % (curl("http://pypi.test:8080/", "control"),
                                          shlex.quote(DIRECT)))
    assert "control=ok" in out, out
    assert re.search(r"listeners=[12]\b", out), out  # the relay, v4 (and v6): the test sees it
    assert "=answered" not in out and "=refused" in out, out
    pid, netdir = enforcer_pid(box)
    log = denied(netdir, lambda e: "loopback" in e["rule"])
    assert any(e["kind"] == "connect" and e["target"].startswith(("127.0.0.1:", "[::1]:")) and
               "TCP relay" in e["rule"] for e in log), log


@pytest.fixture(params=["root", "rootless"])
def openbox(request, tmp_path, net):
    s = _box(request, tmp_path, net,
             "sandbox:\n  network: egress\n  network_policy:\n    defaultAction: allow\n")
    yield s
    s.down()


def test_relay_rechecks_what_the_filter_let_through(openbox):
    """Defence in depth: with the table's always-denied set emptied from the host (a bug in nft
    simulated), the relay still refuses the host's and private addresses."""
    out = run(openbox, "; ".join([curl("http://203.0.113.10:8080/", "control"),
                                  curl("http://%s:8080/" % fakenet.HOST_ADDR, "host_before")]))
    assert "control=ok" in out and "host_before=fail" in out, out
    pid, netdir = enforcer_pid(openbox)
    for cmd in (["nft", "flush", "set", "inet", "sbx", "always4"],):
        subprocess.run(["nsenter", "-t", str(pid), "-n"] + cmd, check=True)
    listed = subprocess.run(["nsenter", "-t", str(pid), "-n", "nft", "list", "set", "inet", "sbx",
                             "always4"], capture_output=True, text=True, check=True).stdout
    assert "10.0.0.0/8" not in listed and fakenet.HOST_ADDR not in listed, listed
    out = run(openbox, "; ".join([curl("http://203.0.113.10:8080/", "control"),
                                  curl("http://%s:8080/" % fakenet.HOST_ADDR, "host"),
                                  curl("http://10.77.0.1:8080/", "private"),
                                  curl("http://198.51.100.1:18080/", "gateway")]))
    assert "control=ok" in out, out
    for k in ("host", "private", "gateway"):
        assert k + "=fail" in out, out
    # refused by the relay (its reason is the policy's), not by the filter
    log = denied(netdir, lambda e: e["target"] == "10.77.0.1:8080/tcp")
    rules = {e["target"]: e["rule"] for e in log}
    assert rules.get("%s:8080/tcp" % fakenet.HOST_ADDR, "").startswith("always-denied: host"), log
    assert rules.get("10.77.0.1:8080/tcp") == "always-denied: 10.0.0.0/8", log


def test_rootless_rules_belong_to_the_outer_user_namespace(box):
    """Rootless, what keeps root inside off the rules is only which user namespace owns the
    network namespace. The positive control: the user that ran sbx, joining the enforcer's
    (outer) user namespace, reads and could change the table; root inside, one namespace
    further in, cannot even list it."""
    if box.user is None:
        pytest.skip("rootless only (as root the host's user namespace owns the rules)")
    u = box.user
    out = run(box, "cat /proc/self/uid_map; nft list table inet sbx >/dev/null 2>&1 && "
                   "echo inside=worked || echo inside=refused")
    assert "inside=refused" in out, out
    # the sandbox's ids are the outer namespace's, one to one (root inside is the user)
    assert re.search(r"^\s*0\s+0\s+1$", out, re.M), out
    pid, _ = enforcer_pid(box)
    p = subprocess.run(["setpriv", "--reuid=%d" % u.uid, "--regid=%d" % u.gid, "--init-groups",
                        "nsenter", "--preserve-credentials", "-U", "-n", "-t", str(pid),
                        "nft", "list", "table", "inet", "sbx"], capture_output=True, text=True)
    assert p.returncode == 0 and "chain out" in p.stdout, (p.returncode, p.stderr)
