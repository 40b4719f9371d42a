"""sandbox.network egress (docs/network.md): the datapath against a fake internet of network
namespaces (fakenet.py). sbx runs in the fake internet's "host" namespace; every test is offline
and leaves the machine's own network as it was."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

import conftest
import fakenet
from conftest import alive, slow

pytestmark = pytest.mark.skipif(not fakenet.available(), reason="needs root, pasta, nft, ip")


@pytest.fixture(scope="module")
def net():
    n = fakenet.FakeNet()
    yield n
    n.close()


class NetSbx(conftest.Sbx):
    def __init__(self, home, config, net):
        super().__init__(home, config)
        self.net = net

    def cmd(self, *args):
        return self.net.wrap(super().cmd(*args))


def policy_yaml(default, rules):
    lines = ["  network_policy:", "    defaultAction: %s" % default, "    egress:"]
    lines += ['      - {action: %s, target: "%s"}' % r for r in rules]
    if not rules:
        lines[-1] = "    egress: []"
    return "\n".join(lines) + "\n"


@pytest.fixture
def egress(tmp_path, net):
    made = []

    def factory(default="deny", rules=(), extra=""):
        n = len(made)
        cfg = tmp_path / ("net-%d.yaml" % n)
        cfg.write_text("sandbox:\n  network: egress\n" + policy_yaml(default, list(rules)) + extra)
        s = NetSbx(tmp_path / ("home-%d" % n), str(cfg), net)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.down()


# One exec runs every probe of a test; each prints "name=ok" or "name=fail".
CURL = 'curl -s -m 3 -o /dev/null %s && echo %s=ok || echo %s=fail'


def probes(s, thread, **urls):
    script = "; ".join(CURL % (u, k, k) for k, u in urls.items())
    r = s.sh(thread, script, timeout=120)
    got = dict(line.split("=", 1) for line in r["stdout"].split() if "=" in line)
    return got


def state_dir(s, thread):
    ids = [x["id"] for x in s.ps() if x.get("thread") == thread]
    assert ids, s.ps()
    return os.path.join(s.home, "sandboxes", ids[0])


def denied_log(s, thread, until=None):
    """The sandbox's denied.log (waiting up to 3 s for an entry until() accepts)."""
    path = os.path.join(state_dir(s, thread), "net", "denied.log")
    deadline = time.monotonic() + slow(3)
    while True:
        with open(path) as f:
            log = [json.loads(line) for line in f]
        if until is None or any(until(e) for e in log) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def test_domains_wildcards_and_literals(egress):
    s = egress("deny", [("allow", "pypi.test"), ("allow", "*.cdn.test")])
    got = probes(s, "t", pypi="http://pypi.test:8080/", cdn="http://files.cdn.test:8080/",
                 apex="http://cdn.test:8080/", denied="http://denied.test:8080/",
                 denied_ip="http://203.0.113.30:8080/", literal="http://203.0.113.40:8080/")
    assert got == {"pypi": "ok", "cdn": "ok", "apex": "fail", "denied": "fail",
                   "denied_ip": "fail", "literal": "fail"}
    # a denied name is NXDOMAIN from the sandbox's resolver, which resolv.conf names
    r = s.sh("t", "cat /etc/resolv.conf; getent hosts denied.test; echo rc=$?")
    assert "nameserver 127.0.0.53" in r["stdout"] and "rc=2" in r["stdout"], r
    def connect(e):
        return e["kind"] == "connect" and e["target"] == "203.0.113.40:8080/tcp"
    log = denied_log(s, "t", connect)
    sid = os.path.basename(state_dir(s, "t"))
    assert any(e == dict(e, sandbox=sid, kind="lookup", target="denied.test", rule="default")
               for e in log), log
    assert any(connect(e) and e["sandbox"] == sid for e in log), log
    time.sleep(0.5)  # counters.json is rewritten at most every 250 ms
    with open(os.path.join(state_dir(s, "t"), "net", "counters.json")) as f:
        c = json.load(f)
    assert c["denied_lookups"] >= 2 and c["denied_connections"] >= 1 and c["allowed_lookups"] >= 2


def test_cidr_rules_and_always_denied_under_default_allow(egress, net):
    s = egress("allow", [("deny", "203.0.113.32/28"), ("allow", "10.77.0.0/16")])
    got = probes(s, "t", public="http://203.0.113.10:8080/", cidr_deny="http://203.0.113.40:8080/",
                 private_allowed="http://10.77.0.1:8080/",
                 host_addr="http://%s:8080/" % fakenet.HOST_ADDR,
                 gateway_not_host="http://198.51.100.1:18080/",
                 metadata="http://169.254.169.254/")
    assert got == {"public": "ok", "cidr_deny": "fail", "private_allowed": "ok",
                   "host_addr": "fail", "gateway_not_host": "fail", "metadata": "fail"}
    s2 = egress("allow")
    got = probes(s2, "t", public="http://pypi.test:8080/", private="http://10.77.0.1:8080/")
    assert got == {"public": "ok", "private": "fail"}


def test_other_resolvers_are_unreachable(egress):
    s = egress("allow")
    script = ("import socket,struct\n"
              "q=struct.pack('!HHHHHH',7,256,1,0,0,0)+b'\\x04pypi\\x04test\\x00'+struct.pack('!HH',1,1)\n"
              "for srv in ('127.0.0.53','203.0.113.53'):\n"
              "  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(2)\n"
              "  try:\n"
              "    s.sendto(q,(srv,53)); s.recv(512); print(srv,'answered')\n"
              "  except OSError as e: print(srv,'blocked',e)\n")
    r = s.sh("t", "python3 -c %s" % shlex_quote(script))
    assert "127.0.0.53 answered" in r["stdout"], r
    assert "203.0.113.53 blocked" in r["stdout"], r


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


def write_policy(s, thread, policy):
    """What `sbx net` and sbxd's /policy do (src/net/store.h): a whole file, renamed in place."""
    d = os.path.join(state_dir(s, thread), "net")
    tmp = os.path.join(d, ".policy.test")
    with open(tmp, "w") as f:
        json.dump(policy, f)
    os.rename(tmp, os.path.join(d, "policy.json"))


def test_runtime_change_flips_access_both_ways(egress):
    s = egress("deny")
    loop = ("for i in $(seq 1 40); do curl -s -m 1 -o /dev/null http://pypi.test:8080/ && "
            "{ echo flipped=$i; break; }; sleep 0.05; done")
    assert probes(s, "t", before="http://pypi.test:8080/") == {"before": "fail"}
    write_policy(s, "t", {"defaultAction": "deny", "egress": [{"action": "allow",
                                                                "target": "pypi.test"}]})
    t0 = time.monotonic()
    r = s.sh("t", loop)
    assert "flipped=" in r["stdout"], r
    assert time.monotonic() - t0 < slow(3)  # the exec itself, plus well under a second of waiting
    assert int(r["stdout"].split("flipped=")[1].split()[0]) <= 20  # <= 1 s of retries
    # and back: the pinned address goes with the rule that pinned it
    write_policy(s, "t", {"defaultAction": "deny", "egress": []})
    r = s.sh("t", "for i in $(seq 1 40); do curl -s -m 1 -o /dev/null http://203.0.113.10:8080/ "
                  "|| { echo flipped=$i; break; }; sleep 0.05; done")
    assert "flipped=" in r["stdout"], r
    assert int(r["stdout"].split("flipped=")[1].split()[0]) <= 20


def enforcer_pid(s, thread):
    with open(os.path.join(state_dir(s, thread), "net", "enforcer")) as f:
        return int(re.search(r"pid=(\d+)", f.read()).group(1))


def test_enforcer_outlives_front_ends_and_fails_closed(egress):
    s = egress("allow")
    assert probes(s, "t", a="http://pypi.test:8080/") == {"a": "ok"}
    pid = enforcer_pid(s, "t")
    # every CLI call is a new front-end: the same enforcer serves the sandbox
    s.ok("ps")
    assert probes(s, "t", a="http://pypi.test:8080/") == {"a": "ok"}
    assert enforcer_pid(s, "t") == pid and alive(pid)
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.02)
    r = s.sh("t", "ip route; " + CURL % ("http://203.0.113.10:8080/", "lit", "lit"))
    assert "lit=fail" in r["stdout"] and "default" not in r["stdout"], r


def test_destroy_stops_the_enforcer(egress):
    s = egress("allow")
    s.ok("exec", "-t", "t", "--", "true")
    pid = enforcer_pid(s, "t")
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                              text=True).stdout.split()
    assert children, "no pasta under the enforcer"
    s.ok("rm", "-t", "t")
    for _ in range(100):
        if not alive(pid) and not any(alive(int(c)) for c in children):
            break
        time.sleep(0.02)
    assert not alive(pid) and not any(alive(int(c)) for c in children)


def test_spare_takes_its_policy(egress):
    s = egress("deny", [("allow", "pypi.test")], extra="  spares: 1\n")
    s.ok("run", "--", "true")
    spare_home = os.path.join(s.home, "spare", "sandboxes")
    for _ in range(300):
        ids = os.listdir(spare_home) if os.path.isdir(spare_home) else []
        if ids and os.path.exists(os.path.join(spare_home, ids[0], "net", "applied")):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no spare with a running enforcer")
    p = s.run("exec", "-t", "t", "--json", "--", "; ".join(
        CURL % (u, k, k) for k, u in (("pypi", "http://pypi.test:8080/"),
                                      ("lit", "http://203.0.113.40:8080/"))),
        env={"SBX_DEBUG": "1"}, check=0)
    assert re.search(r"took spare", p.stderr.decode()), p.stderr.decode()[-2000:]
    out = json.loads(p.stdout)["stdout"]
    assert "pypi=ok" in out and "lit=fail" in out, out
