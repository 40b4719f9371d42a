"""sandbox.network egress (docs/network.md): the datapath against a fake internet of network
namespaces (fakenet.py). sbx runs in the fake internet's "host" namespace; every test is offline
and leaves the machine's own network as it was."""
import fcntl
import glob
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
from test_net_policy import egress as egress_api
from test_sbxd_http import APP, sbxd  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not fakenet.available(), reason="needs root, pasta, nft, ip")


@pytest.fixture(scope="module")
def net():
    n = fakenet.FakeNet()
    yield n
    n.close()


class NetSbx(fakenet.Wrapped, conftest.Sbx):
    pass


# rootless egress (docs/network.md, Rootless): every test that takes `egress` runs twice, once
# as root and once as an ordinary user made for the module (test_rootless's, with subids)
from test_rootless import bindir, user  # noqa: E402,F401 (the fixtures)


def policy_yaml(default, rules):
    lines = ["  network_policy:", "    defaultAction: %s" % default, "    egress:"]
    lines += ['      - {action: %s, target: "%s"}' % r for r in rules]
    if not rules:
        lines[-1] = "    egress: []"
    return "\n".join(lines) + "\n"


@pytest.fixture(params=["root", "rootless"])
def egress(request, tmp_path, net):
    made = []
    u = request.getfixturevalue("user") if request.param == "rootless" else None
    top = fakenet.folder(tmp_path, u)

    def factory(default="deny", rules=(), extra=""):
        n = len(made)
        cfg = fakenet.write_config(top, "net-%d.yaml" % n, "sandbox:\n  network: egress\n" +
                                   policy_yaml(default, list(rules)) + extra, u)
        s = NetSbx(os.path.join(top, "home-%d" % n), cfg, net, u)
        made.append(s)
        return s

    factory.rootless = u is not None
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
    """A hand edit (src/net/store.h): a whole file, renamed in place, and no signal (`sbx net`
    and sbxd's /policy send one after it): the enforcer sees it at its next look."""
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


def nft_in(pid, *args):
    return subprocess.run(["nsenter", "-t", str(pid), "-n", "nft"] + list(args),
                          capture_output=True, text=True, check=True).stdout


def applied_gen(s, thread, above):
    path = os.path.join(state_dir(s, thread), "net", "applied")
    deadline = time.monotonic() + slow(3)
    while time.monotonic() < deadline:
        with open(path) as f:
            gen = int(f.read() or 0)
        if gen > above:
            return gen
        time.sleep(0.02)
    raise AssertionError("the enforcer did not apply the change (applied %d)" % gen)


def test_writers_signal_the_enforcer_which_holds_no_inotify_instance(egress):
    """sbx net (like sbxd's /policy and a spare's take) signals the enforcer after writing
    policy.json; the enforcer's look at the file every 250 ms is only the fallback (a hand
    edit). It holds no inotify instance: fs.inotify.max_user_instances (128 per user by default)
    would cap a user's egress sandboxes."""
    s = egress("deny")
    # the look at the file switched off: what is applied below, the signal applied
    s.ok("exec", "-t", "t", "--", "true", env={"SBX_NET_RELOAD_POLL_MS": "0"})
    pid = enforcer_pid(s, "t")
    links = [os.readlink("/proc/%d/fd/%s" % (pid, f)) for f in os.listdir("/proc/%d/fd" % pid)]
    assert not any("inotify" in l for l in links), links
    gen = applied_gen(s, "t", 0)
    s.ok("net", "-t", "t", "allow", "pypi.test")
    gen = applied_gen(s, "t", gen)
    assert probes(s, "t", a="http://pypi.test:8080/") == {"a": "ok"}
    # the positive control: a hand edit (no signal) is not seen while the look is off
    write_policy(s, "t", {"defaultAction": "deny", "egress": []})
    time.sleep(1)
    with open(os.path.join(state_dir(s, "t"), "net", "applied")) as f:
        assert int(f.read()) == gen
    os.kill(pid, signal.SIGUSR1)  # what the writers send
    applied_gen(s, "t", gen)
    assert probes(s, "t", a="http://pypi.test:8080/") == {"a": "fail"}


def test_policy_change_replaces_the_policys_part_and_remakes_a_lost_table(egress):
    """A change swaps the filter chain's rules and the pin sets in one transaction (the hooks,
    always-denied sets and the relay's chain stay: nft.h); the table deleted from outside is made
    whole again by the next change."""
    s = egress("deny", [("allow", "pypi.test")])
    assert probes(s, "t", a="http://pypi.test:8080/", b="http://203.0.113.40:8080/") == \
        {"a": "ok", "b": "fail"}
    pid = enforcer_pid(s, "t")
    before = nft_in(pid, "-a", "list", "table", "inet", "sbx")
    handle = re.search(r"chain relay \{ # handle (\d+)", before).group(1)
    assert "@pin4" in before and re.search(r"set pin4 \{[^}]*elements", before), before
    gen = applied_gen(s, "t", 0)
    write_policy(s, "t", {"defaultAction": "deny", "egress": [{"action": "allow", "target": "203.0.113.40"}]})
    gen = applied_gen(s, "t", gen)
    after = nft_in(pid, "-a", "list", "table", "inet", "sbx")
    assert "chain relay { # handle %s" % handle in after, after  # the same chain, not a new table
    assert "ip daddr 203.0.113.40 ct mark set 0x%08x accept" % gen in after, after
    assert not re.search(r"set pin4 \{[^}]*elements", after), after  # pypi.test's pin went with its rule
    assert probes(s, "t", a="http://pypi.test:8080/", b="http://203.0.113.40:8080/") == \
        {"a": "fail", "b": "ok"}
    # deleted from outside (the positive control: nothing filters, the sandbox reaches anything)
    nft_in(pid, "delete", "table", "inet", "sbx")
    assert probes(s, "t", c="http://203.0.113.10:8080/") == {"c": "ok"}
    write_policy(s, "t", {"defaultAction": "deny", "egress": []})
    applied_gen(s, "t", gen)
    again = nft_in(pid, "list", "table", "inet", "sbx")
    assert "chain relay" in again and "set always4" in again, again
    assert probes(s, "t", b="http://203.0.113.40:8080/", c="http://203.0.113.10:8080/") == \
        {"b": "fail", "c": "fail"}


def test_enforcer_outlives_front_ends_and_fails_closed(egress):
    s = egress("allow")
    assert probes(s, "t", a="http://pypi.test:8080/") == {"a": "ok"}
    pid = enforcer_pid(s, "t")
    # it runs as whoever ran sbx (rootless: the user, in the sandbox's outer user namespace)
    with open("/proc/%d/status" % pid) as f:
        uids = re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)
    assert int(uids) == (s.user.uid if s.user else 0), uids
    if s.user:
        assert os.readlink("/proc/%d/ns/user" % pid) != os.readlink("/proc/self/ns/user")
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


def test_rootless_without_a_usable_tun_device_is_refused_in_one_line(net, user, tmp_path):
    """pasta opens /dev/net/tun as the user: a host where it is 0600 (as here, in a mount
    namespace of the test's own) refuses egress naming the device and the fix, and leaves no
    sandbox or enforcer behind."""
    top = fakenet.folder(tmp_path, user, "tun600")
    cfg = fakenet.write_config(top, "net.yaml", "sandbox:\n  network: egress\n", user)
    s = NetSbx(os.path.join(top, "home"), cfg, net, user, tun_mode=0o600)
    try:
        p = s.run("exec", "-t", "t", "--", "true")
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert "pasta needs /dev/net/tun readable and writable" in err, err
        assert "chmod 0666 /dev/net/tun" in err, err
        assert s.ps() == [], s.ps()
        assert not glob.glob(os.path.join(s.home, "sandboxes", "*", "net", "enforcer")), err
    finally:
        s.down()


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
    if egress.rootless:
        pytest.skip("spares are off rootless (docs/hosts.md)")
    s = egress("deny", [("allow", "pypi.test")], extra="  spares: 1\n")
    s.ok("run", "--", "true")
    spare_home = os.path.join(s.home, "spare", "sandboxes")
    def made(i):
        # the filler holds spare/locks/<id> until the spare is made: a take skips it till then
        if not os.path.exists(os.path.join(spare_home, i, "net", "applied")):
            return False
        try:
            fd = os.open(os.path.join(s.home, "spare", "locks", i), os.O_RDONLY)
        except FileNotFoundError:
            return True  # no lock file: nobody holds it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    for _ in range(600):
        ids = os.listdir(spare_home) if os.path.isdir(spare_home) else []
        if ids and made(ids[0]):
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


# ---- sbxd on an egress configuration (it runs in the fake internet's host namespace) ----

def sandbox_probes(sb, **urls):
    out, end = sb.run("; ".join(CURL % (u, k, k) for k, u in urls.items()), timeout=120)
    assert end["type"] == "execution_complete", end
    return dict(line.split("=", 1) for line in "\n".join(out).split() if "=" in line)


def test_sbxd_create_with_network_policy(sbxd, net):
    s = sbxd(config="sandbox:\n  network: egress\n", net=net)
    pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.test"},
                                               {"action": "allow", "target": "203.0.113.40"}]}
    sb = s.create(networkPolicy=pol)
    # the sandbox starts under the request's policy, not the configuration's (default allow)
    got = sandbox_probes(sb, pypi="http://pypi.test:8080/", denied="http://denied.test:8080/",
                         cdn="http://files.cdn.test:8080/", literal="http://203.0.113.40:8080/",
                         other="http://203.0.113.20:8080/")
    assert got == {"pypi": "ok", "denied": "fail", "cdn": "fail", "literal": "ok", "other": "fail"}
    r = egress_api(s, sb.id, "GET")
    assert r.status == 200, r.body
    assert r.json() == {"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft",
                        "policy": pol}
    # a PATCH through the API takes effect in the running sandbox
    r = egress_api(s, sb.id, "PATCH", [{"action": "allow", "target": "*.cdn.test"}])
    assert r.status == 200, r.body
    for _ in range(40):
        if sandbox_probes(sb, cdn="http://files.cdn.test:8080/") == {"cdn": "ok"}:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the PATCH did not open *.cdn.test")
    # without networkPolicy: the configuration's (none given here: default allow)
    sb2 = s.create()
    assert egress_api(s, sb2.id, "GET").json()["mode"] == "allow_all"
    got = sandbox_probes(sb2, denied="http://denied.test:8080/", private="http://10.77.0.1:8080/")
    assert got == {"denied": "ok", "private": "fail"}


def test_sbxd_logs_each_denial_with_sandbox_target_and_rule(sbxd, net):
    """sbxd follows every sandbox's denied log: an operator watching sbxd's log sees a denied
    lookup and a denied connection with the sandbox id, the target and the rule."""
    s = sbxd(config="sandbox:\n  network: egress\n", net=net)
    pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.test"}]}
    sb = s.create(networkPolicy=pol)
    got = sandbox_probes(sb, denied="http://denied.test:8080/",
                         literal="http://203.0.113.40:8080/", pypi="http://pypi.test:8080/")
    assert got == {"denied": "fail", "literal": "fail", "pypi": "ok"}

    def denials():
        return [r for r in s.logs if r.get("msg") == "egress denied"]
    deadline = time.monotonic() + slow(10)
    want = {("lookup", "denied.test", "default"), ("connect", "203.0.113.40:8080/tcp")}
    while time.monotonic() < deadline:
        seen = {(r["kind"], r["target"], r["rule"]) for r in denials()}
        if ("lookup", "denied.test", "default") in seen and \
                any(k == "connect" and t == "203.0.113.40:8080/tcp" for k, t, _ in seen):
            break
        time.sleep(0.1)
    logs = denials()
    assert any(r["sandbox_id"] == sb.id and r["kind"] == "lookup" and r["target"] == "denied.test"
               and r["rule"] == "default" and r["level"] == "info" for r in logs), (want, s.logs)
    assert any(r["sandbox_id"] == sb.id and r["kind"] == "connect" and
               r["target"] == "203.0.113.40:8080/tcp" and r["rule"] for r in logs), s.logs
    # each denial once (the follower keeps its offset), and nothing for what was allowed
    assert len([r for r in logs if r["target"] == "denied.test"]) == \
        len([line for line in open(os.path.join(s.home, "sandboxes", sb.id, "net", "denied.log"))
             if '"denied.test"' in line]), logs
    assert not any("pypi.test" == r["target"] for r in logs), logs
    # a restarted sbxd does not log the lines already there again, and follows new ones
    assert s.stop() == 0
    s2 = sbxd(config="sandbox:\n  network: egress\n", net=net, home=s.home)
    sb2 = type(sb)(s2, sb.id)
    assert sandbox_probes(sb2, again="http://203.0.113.30:8080/") == {"again": "fail"}
    deadline = time.monotonic() + slow(10)
    while time.monotonic() < deadline and not any(
            r.get("msg") == "egress denied" and r["target"] == "203.0.113.30:8080/tcp"
            for r in s2.logs):
        time.sleep(0.1)
    again = [r for r in s2.logs if r.get("msg") == "egress denied"]
    assert any(r["target"] == "203.0.113.30:8080/tcp" and r["sandbox_id"] == sb.id
               for r in again), s2.logs
    assert not any(r["target"] in ("denied.test", "203.0.113.40:8080/tcp") for r in again), again


def test_sbxd_port_exposure_under_deny_all(sbxd, net):
    """sbxd's proxy reaches a sandbox's server through its loopback, which the policy does not
    touch: the port is served while the internet is denied."""
    s = sbxd(config="sandbox:\n  network: egress\n", net=net)
    sb = s.create(networkPolicy={"defaultAction": "deny", "egress": []})
    sb.write("/tmp/app.py", APP.encode())
    sb.events("python3 /tmp/app.py", background=True)
    tok = {"X-EXECD-ACCESS-TOKEN": sb.token}
    for _ in range(100):
        r = s.req("GET", "/direct/%s/8000/hello" % sb.id, key=None, headers=tok)
        if r.status == 200:
            break
        time.sleep(0.1)
    assert r.status == 200 and r.body == b"path=/hello seen=X-Forwarded-For", r.body
    ep = s.req("GET", "/v1/sandboxes/%s/endpoints/8000" % sb.id)
    assert ep.status == 200 and ep.json()["endpoint"].endswith("/direct/%s/8000" % sb.id), ep.body
    r = s.req("GET", "/sandboxes/%s/proxy/8000/p" % sb.id, key=None, headers=tok)
    assert r.status == 200 and r.body == b"path=/p seen=X-Forwarded-For", r.body
    r = s.req("POST", "/direct/%s/8000/echo" % sb.id, b"payload", key=None, headers=tok)
    assert r.status == 201 and r.body == b"echo:payload"
    # while the sandbox itself reaches nothing outside
    got = sandbox_probes(sb, pypi="http://pypi.test:8080/", literal="http://203.0.113.10:8080/",
                         local="http://127.0.0.1:8000/")
    assert got == {"pypi": "fail", "literal": "fail", "local": "ok"}


# ---- IPv6 (the fake internet has a v6 default route: pasta gives the sandbox v6 too) ----

def test_ipv6_names_literals_and_always_denied(egress):
    s = egress("deny", [("allow", "pypi.test"), ("allow", "2001:db8:113::20")])
    r = s.sh("t", "ip -6 addr show dev eth0; ip -6 route")
    assert "2001:db8:100::2" in r["stdout"] and "default" in r["stdout"], r
    got = probes(s, "t", pypi6="-6 http://pypi.test:8080/", denied6="-6 http://denied.test:8080/",
                 literal="http://[2001:db8:113::40]:8080/",
                 allowed_literal="http://[2001:db8:113::20]:8080/")
    assert got == {"pypi6": "ok", "denied6": "fail", "literal": "fail", "allowed_literal": "ok"}
    # the AAAA answer was pinned (pin6), the denied literal logged
    log = denied_log(s, "t", lambda e: e["target"].startswith("[2001:db8:113::40]"))
    assert any(e["kind"] == "connect" and e["target"].startswith("[2001:db8:113::40]")
               for e in log), log
    # under default allow: ULA, metadata, the host's own v6 addresses and loopback stay denied
    s2 = egress("allow")
    got = probes(s2, "t", public="http://[2001:db8:113::40]:8080/",
                 ula="http://[fd00::10]:8080/", metadata="http://[fd00:ec2::254]:8080/",
                 host_addr="http://[%s]:8080/" % fakenet.HOST_ADDR6,
                 host_lo="http://[::1]:18080/", gateway_not_host="http://[2001:db8:100::1]:18080/",
                 rebind6="-6 http://rebind.test:8080/", hostname6="-6 http://hostaddr.test:8080/")
    assert got == {"public": "ok", "ula": "fail", "metadata": "fail", "host_addr": "fail",
                   "host_lo": "fail", "gateway_not_host": "fail", "rebind6": "fail",
                   "hostname6": "fail"}


def test_ipv6_cidr_rules(egress):
    s = egress("allow", [("deny", "2001:db8:113::40/126"), ("allow", "fd00::/64")])
    got = probes(s, "t", public="http://[2001:db8:113::10]:8080/",
                 cidr_deny="http://[2001:db8:113::40]:8080/",
                 ula_allowed="http://[fd00::10]:8080/", metadata="http://[fd00:ec2::254]:8080/")
    assert got == {"public": "ok", "cidr_deny": "fail", "ula_allowed": "ok", "metadata": "fail"}
    s2 = egress("deny", [("allow", "2001:db8:113::/112"), ("deny", "2001:db8:113::30")])
    got = probes(s2, "t", in_cidr="http://[2001:db8:113::40]:8080/",
                 first_rule_wins="http://[2001:db8:113::30]:8080/",
                 v4_not_covered="http://203.0.113.40:8080/")
    assert got == {"in_cidr": "ok", "first_rule_wins": "ok", "v4_not_covered": "fail"}


# ---- DNS over TCP (RFC 7766) ----

DNS_TCP = r'''
import socket, struct, sys
def q(name, qtype, qid):
    body = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + body + struct.pack("!HH", qtype, 1)
def frame(m):
    return struct.pack("!H", len(m)) + m
def read(s):
    def exact(n):
        d = b""
        while len(d) < n:
            more = s.recv(n - len(d))
            assert more, "closed"
            d += more
        return d
    return exact(struct.unpack("!H", exact(2))[0])
def show(tag, r):
    qid, flags, _, an = struct.unpack("!HHHH", r[:8])
    print("%s id=%d rcode=%d an=%d tc=%d" % (tag, qid, flags & 15, an, (flags >> 9) & 1))
s = socket.create_connection(("127.0.0.53", 53), timeout=5)
# pipelined on one connection: answered in order, each with its own id
s.sendall(frame(q("pypi.test", 1, 11)) + frame(q("denied.test", 1, 12)) + frame(q("pypi.test", 28, 13)))
for tag in ("pypi", "denied", "pypi6"):
    show(tag, read(s))
s.sendall(frame(q("big.test", 1, 14)))
show("big_tcp", read(s))
s.sendall(frame(q("rebind.test", 1, 16)))
show("rebind_tcp", read(s))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.sendto(q("big.test", 1, 15), ("127.0.0.53", 53))
show("big_udp", u.recv(4096))
# garbage: the connection is closed, the resolver goes on
g = socket.create_connection(("127.0.0.53", 53), timeout=5)
g.sendall(b"\x00\x02zz")
print("garbage", "closed" if g.recv(10) == b"" else "answered")
'''


def test_dns_over_tcp(egress):
    s = egress("deny", [("allow", "pypi.test"), ("allow", "big.test"), ("allow", "rebind.test")])
    r = s.sh("t", "python3 -c %s" % shlex_quote(DNS_TCP))
    out = r["stdout"]
    for want in ("pypi id=11 rcode=0 an=1 tc=0", "denied id=12 rcode=3 an=0",
                 "pypi6 id=13 rcode=0 an=1", "big_tcp id=14 rcode=0 an=40 tc=0",
                 "big_udp id=15 rcode=0 an=0 tc=1", "rebind_tcp id=16 rcode=0 an=1",
                 "garbage closed"):
        assert want in out, (want, r)
    # the TCP answer pinned its addresses (203.0.113.40 is one of big.test's), nothing else is
    # ... but not an allowed name's private address (DNS rebinding over TCP)
    got = probes(s, "t", pinned="http://203.0.113.40:8080/", other="http://203.0.113.20:8080/",
                 rebound="http://10.77.0.1:8080/")
    assert got == {"pinned": "ok", "other": "fail", "rebound": "fail"}
    # glibc retries a truncated answer over TCP by itself
    r = s.sh("t", "getent ahostsv4 big.test | grep -c STREAM")
    assert r["stdout"].strip() == "40", r
    log = denied_log(s, "t", lambda e: e["target"] == "denied.test")
    assert any(e["kind"] == "lookup" and e["target"] == "denied.test" for e in log), log
    assert any(e["kind"] == "lookup" and e["target"] == "rebind.test=10.77.0.1" for e in log), log


# ---- the TCP relay (src/net/tcpproxy.c; tcpsrv.py's servers on 203.0.113.10:9000-9002) ----

RELAY = r"""
import hashlib, random, socket, sys, threading, time
BLOCK = random.Random(12).randbytes(1 << 20)
A = '203.0.113.10'

def outcome(c):
    try:
        d = c.recv(100)
        return 'data' if d else 'eof'
    except ConnectionResetError:
        return 'reset'
    except OSError as e:
        return 'error:%s' % e

def download(n):
    c = socket.create_connection((A, 9001), timeout=60)
    c.sendall(b'%d\n' % n)
    h, got = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 18)
        if not b:
            break
        h.update(b); got += len(b)
    return got, h.hexdigest()

def upload(n):
    c = socket.create_connection((A, 9000), timeout=60)
    for off in range(0, n, len(BLOCK)):
        c.sendall(BLOCK[:min(len(BLOCK), n - off)])
    c.shutdown(socket.SHUT_WR)   # half-close: the answer still comes back
    return c.makefile('rb').readline().decode().strip()

def hold():
    c = socket.create_connection((A, 9002), timeout=10)
    c.sendall(b'hi\n')
    return c

cmd = sys.argv[1]
if cmd == 'big':
    n = int(sys.argv[2])
    t = time.monotonic(); got, sha = download(n); dt = time.monotonic() - t
    print('down', got, sha, '%.0f' % (n * 8 / dt / 1e6))
    print('up', upload(n))
elif cmd == 'refused':
    t = time.monotonic()
    try:
        c = socket.create_connection((A, 9999), timeout=10)
        r = outcome(c)
    except ConnectionRefusedError:
        r = 'refused'
    except ConnectionResetError:
        r = 'reset'
    print('refused', r, '%.3f' % (time.monotonic() - t))
elif cmd == 'parallel':
    n = int(sys.argv[2]); res = []
    def one():
        try:
            res.append(download(1 << 20))
        except OSError as e:
            res.append(('error', str(e)))
    ts = [threading.Thread(target=one) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print('parallel', len(set(res)), len(res), res[0])
elif cmd == 'cap':
    n = int(sys.argv[2])
    held = [hold() for _ in range(n)]
    print('held', sum(c.makefile('rb').readline() == b'hi\n' for c in held))
    # the relay resets it as soon as it accepts it: connect() itself may already see that
    try:
        extra = socket.create_connection((A, 9002), timeout=10)
        extra.sendall(b'hi\n')
        print('extra', outcome(extra))
    except (ConnectionResetError, BrokenPipeError):
        print('extra', 'reset')
    for c in held:
        c.close()
    for i in range(100):   # the relay frees them once both ends have closed
        try:
            r = outcome(hold())
        except OSError:
            r = 'reset'
        if r == 'data':
            print('after', 'ok', i)
            break
        time.sleep(0.05)
    else:
        print('after', 'fail')
"""


def relay(s, *args, **kw):
    r = s.sh("t", "python3 -c %s %s" % (shlex_quote(RELAY), " ".join(args)), timeout=300, **kw)
    return r["stdout"] + r["stderr"]


def test_relay_large_transfer_and_half_close(egress):
    import tcpsrv
    s = egress("allow")
    n = 200 << 20
    out = relay(s, "big", str(n))
    want = tcpsrv.blob_sha256(n)
    assert "down %d %s " % (n, want) in out, out
    assert "up %d %s" % (n, want) in out, out


def test_relay_refused_upstream_is_a_reset_at_once(egress):
    s = egress("allow")
    out = relay(s, "refused")
    m = re.search(r"refused (\w+) ([\d.]+)", out)
    assert m and m.group(1) in ("reset", "refused"), out
    assert float(m.group(2)) < 1.0, out


def test_relay_parallel_connections(egress):
    import tcpsrv
    s = egress("allow")
    out = relay(s, "parallel", "64")
    # 64 downloads, every one complete and equal
    assert "parallel 1 64 (%d, '%s')" % (1 << 20, tcpsrv.blob_sha256(1 << 20)) in out, out


def test_relay_connection_cap(egress):
    s = egress("allow")
    # SBX_NET_TCP_MAX (the enforcer's environment) lowers the cap from 512 to 8
    out = relay(s, "cap", "8", env={"SBX_NET_TCP_MAX": "8"})
    assert "held 8" in out, out
    assert "extra reset" in out or "extra eof" in out, out
    assert "after ok" in out, out
    # the held connections were the relay's: its sockets, in the sandbox's namespace
    pid = enforcer_pid(s, "t")
    ss = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-ltnp"], capture_output=True,
                        text=True).stdout
    assert "sbx-net" in ss and "127.0.0.1:" in ss, ss


HOLD = r"""
import socket, sys, time
c = socket.create_connection(('203.0.113.10', 9002), timeout=10)
c.sendall(b'hi\n'); print('before', c.recv(10) == b'hi\n', flush=True)
open('/tmp/held', 'w').close()
while not __import__('os').path.exists('/tmp/denied'):
    time.sleep(0.02)
t = time.monotonic()
try:
    c.sendall(b'again\n'); r = 'data' if c.recv(10) else 'eof'
except ConnectionResetError:
    r = 'reset'
except OSError as e:
    r = 'error %s' % e
print('after', r, '%.2f' % (time.monotonic() - t))
"""


def test_policy_change_resets_open_relayed_connections(egress):
    s = egress("deny", [("allow", "203.0.113.0/24")])
    s.ok("exec", "-t", "t", "--", "rm -f /tmp/held /tmp/denied")
    p = subprocess.Popen(s.cmd("exec", "-t", "t", "--", "python3 -c %s" % shlex_quote(HOLD)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(200):
        if s.sh("t", "test -e /tmp/held && echo yes")["stdout"].strip() == "yes":
            break
        time.sleep(0.05)
    write_policy(s, "t", {"defaultAction": "deny", "egress": []})
    time.sleep(0.3)  # the enforcer applies it within milliseconds
    s.sh("t", "touch /tmp/denied")
    out = p.communicate(timeout=60)[0].decode()
    assert "before True" in out, out
    m = re.search(r"after (\w+) ([\d.]+)", out)
    # reset by the relay at the change, not left to stall (the filter drops what the sandbox
    # sends; the relay, on the sandbox's loopback, is what sees the change for open flows)
    assert m and m.group(1) == "reset" and float(m.group(2)) < 2, out
    log = denied_log(s, "t", lambda e: e["target"] == "203.0.113.10:9002/tcp")
    assert any(e["target"] == "203.0.113.10:9002/tcp" and e["rule"] == "default" for e in log), log


def test_deerflow_network_mapping(net, tmp_path):
    """DeerFlow's sandbox.network mapping (its PR #5152) in the config: `sbx config check`
    accepts it, and the sandbox gets what the mode says."""
    top = str(tmp_path)
    made = []
    try:
        def sbx(name, network):
            cfg = fakenet.write_config(top, name + ".yaml", "sandbox:\n  use: linux\n"
                                       "  network: %s\n" % network)
            s = NetSbx(os.path.join(top, "home-" + name), cfg, net)
            made.append(s)
            return s
        allow = sbx("allowlist", "{mode: allowlist, allowlist: [pypi.test, '*.cdn.test'], "
                    "approval: prompt}")
        assert "configuration OK" in allow.ok("config", "check")
        got = probes(allow, "t", pypi="http://pypi.test:8080/", cdn="http://files.cdn.test:8080/",
                     denied="http://denied.test:8080/", literal="http://203.0.113.40:8080/")
        assert got == {"pypi": "ok", "cdn": "ok", "denied": "fail", "literal": "fail"}
        iso = sbx("isolated", "{mode: isolated}")
        assert "configuration OK" in iso.ok("config", "check")
        got = probes(iso, "t", pypi="http://pypi.test:8080/", literal="http://203.0.113.40:8080/")
        assert got == {"pypi": "fail", "literal": "fail"}
        assert "network: \"none\"" in iso.ok("config", "show")
        opened = sbx("open", "{mode: open}")
        got = probes(opened, "t", denied="http://denied.test:8080/",
                     private="http://10.77.0.1:8080/")
        assert got == {"denied": "ok", "private": "fail"}
        bad = sbx("bad", "{mode: allowlist, allowlist: [pypi.test], proxy: squid}")
        p = bad.run("config", "check")
        assert p.returncode == 1 and b"sandbox.network.proxy: unknown key" in p.stderr, p
    finally:
        for s in made:
            s.down()


# ---- the Host / SNI check on ports 80 and 443 (docs/network.md, "Host and SNI") ----

@pytest.fixture(scope="module")
def web(net):
    """HTTP on 203.0.113.10:80 and TLS (a self-signed certificate made here) on :443: the one
    address pypi.test and other.test share. Both servers answer whatever name is asked."""
    key, crt = os.path.join(net.dir, "tls.key"), os.path.join(net.dir, "tls.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "1", "-subj", "/CN=pypi.test"], check=True,
                   capture_output=True)
    import sys
    net._spawn(net.inet, sys.executable, "-m", "http.server", "--bind", "203.0.113.10", "80")
    net._spawn(net.inet, "openssl", "s_server", "-quiet", "-www", "-accept", "203.0.113.10:443",
               "-cert", crt, "-key", key)
    for url in ("http://203.0.113.10/", "https://203.0.113.10/"):
        deadline = time.monotonic() + 30
        while subprocess.run(["ip", "netns", "exec", net.host, "curl", "-k", "-s", "-m", "1",
                              "-o", "/dev/null", url], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "fake internet: %s unreachable" % url
            time.sleep(0.05)
    return net


# Each case prints "case=ok" (the server answered) or "case=fail" (reset, EOF, error).
PEEK = r"""
import socket, ssl, struct, sys, time

A = '203.0.113.10'

def hello(sni):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(i, o, server_hostname=sni)
    try:
        s.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return o.read()

def add_ext(h, t, data):
    # the ClientHello h (one record) with one more extension, every length fixed up
    body = h[9:]
    o = 2 + 32
    o += 1 + body[o]
    o += 2 + struct.unpack('>H', body[o:o + 2])[0]
    o += 1 + body[o]
    exts = body[o + 2:] + struct.pack('>HH', t, len(data)) + data
    body = body[:o] + struct.pack('>H', len(exts)) + exts
    msg = b'\x01' + struct.pack('>I', len(body))[1:] + body
    return h[:3] + struct.pack('>H', len(msg)) + msg

def tls(sni):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        c = socket.create_connection((A, 443), timeout=10)
        ctx.wrap_socket(c, server_hostname=sni).close()
        return 'ok'
    except OSError:
        return 'fail'

def raw(port, data, want):
    try:
        c = socket.create_connection((A, port), timeout=10)
        c.sendall(data)
        got = c.recv(100)
        return 'ok' if got.startswith(want) else 'fail'
    except OSError:
        return 'fail'

def split(port, data, want):
    # the start in two pieces, apart: the relay must wait for the second (edge-triggered peek)
    try:
        c = socket.create_connection((A, port), timeout=10)
        c.sendall(data[:20])
        time.sleep(0.3)
        c.sendall(data[20:])
        return 'ok' if c.recv(100).startswith(want) else 'fail'
    except OSError:
        return 'fail'

def http(host):
    h = b'Host: %s\r\n' % host.encode() if host else b''
    return raw(80, b'GET / HTTP/1.1\r\n' + h + b'Connection: close\r\n\r\n', b'HTTP/')

# the allowed names' lookups pin the address (other.test's is denied: NXDOMAIN)
for n in sys.argv[1:]:
    try:
        socket.getaddrinfo(n, 443, socket.AF_INET)
    except OSError:
        pass
ech = add_ext(hello('pypi.test'), 0xfe0d, bytes(10))
print('sni_allowed=%s' % tls('pypi.test'))
print('sni_other=%s' % tls('other.test'))
print('sni_none=%s' % tls(None))
print('sni_cdn=%s' % tls('any.cdn.test'))
print('ech=%s' % raw(443, ech, b'\x16'))
print('host_allowed=%s' % http('pypi.test'))
print('host_port=%s' % http('PYPI.test:80'))
print('host_other=%s' % http('other.test'))
print('host_none=%s' % http(None))
print('host_absolute=%s' % raw(80, b'GET http://other.test/ HTTP/1.1\r\nHost: pypi.test\r\n\r\n',
                               b'HTTP/'))
print('host_split=%s' % split(80, b'GET / HTTP/1.1\r\nHost: pypi.test\r\nConnection: close\r\n\r\n',
                              b'HTTP/'))
print('sni_split=%s' % split(443, hello('pypi.test'), b'\x16'))
"""


def peek_probes(s, *names):
    r = s.sh("t", "python3 -c %s %s" % (shlex_quote(PEEK), " ".join(names)), timeout=300)
    got = dict(line.split("=", 1) for line in r["stdout"].split() if "=" in line)
    assert len(got) == 12, r
    return got


def test_host_and_sni_must_name_a_pinned_name(egress, web):
    s = egress("deny", [("allow", "pypi.test"), ("allow", "*.cdn.test")])
    got = peek_probes(s, "pypi.test", "other.test")
    assert got == {"sni_allowed": "ok", "sni_other": "fail", "sni_none": "fail", "sni_cdn": "fail",
                   "ech": "fail", "host_allowed": "ok", "host_port": "ok", "host_other": "fail",
                   "host_none": "fail", "host_absolute": "fail", "host_split": "ok",
                   "sni_split": "ok"}
    sid = os.path.basename(state_dir(s, "t"))
    log = denied_log(s, "t", lambda e: e.get("name") == "other.test")
    named = [e for e in log if "pinned" in e]
    for e in named:
        assert e["sandbox"] == sid and e["kind"] == "connect" and e["pinned"] == ["pypi.test"], e
        assert e["target"] in ("203.0.113.10:443/tcp", "203.0.113.10:80/tcp"), e
        assert "allow pypi.test" in e["rule"], e
    assert {(e["target"], e["name"]) for e in named} >= {
        ("203.0.113.10:443/tcp", "other.test"), ("203.0.113.10:80/tcp", "other.test"),
        ("203.0.113.10:443/tcp", "")}, named
    assert any("encrypted ClientHello" in e["rule"] for e in named), named
    # sbx net log shows them with the names
    out = s.ok("net", "-t", "t", "log")
    assert "name other.test is not one 203.0.113.10:443/tcp was pinned for (allow pypi.test)" \
        in out, out


def test_host_and_sni_checks_positive_controls(egress, web):
    # without the check (default allow: no allowlist) the other name and ECH get through
    s = egress("allow")
    got = peek_probes(s, "pypi.test", "other.test")
    assert got == dict.fromkeys(["sni_allowed", "sni_other", "sni_none", "sni_cdn", "ech",
                                 "host_allowed", "host_port", "host_other", "host_none",
                                 "host_absolute", "host_split", "sni_split"], "ok")
    # an address an IP rule allows needs no name; a wildcard's address takes any name below it
    s2 = egress("deny", [("allow", "203.0.113.10"), ("allow", "*.cdn.test")])
    got = peek_probes(s2)
    assert got["sni_none"] == "ok" and got["host_none"] == "ok" and got["sni_other"] == "ok", got
    s3 = egress("deny", [("allow", "*.test")])
    got = peek_probes(s3, "pypi.test")
    # pinned for pypi.test under *.test: other.test is the same rule's, so it passes
    assert got["sni_other"] == "ok" and got["host_other"] == "ok" and got["ech"] == "fail", got
