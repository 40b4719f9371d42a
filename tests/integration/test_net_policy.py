"""The egress policy's control plane, without the datapath: `sbx net` and sbxd's egress API
(OpenSandbox's GET/PATCH/DELETE /policy below the endpoint for port 18080, raw HTTP) on a
sandbox's net/policy.json, sbxd's /metrics over the enforcer's counters, and networkPolicy at
create. The sandboxes here have sandbox.network none; the file an egress sandbox's enforcer
watches is seeded by the test where one is needed (the datapath's own tests make real ones)."""
import json
import os
import time

import pytest

from test_sbxd_http import KEY, SBX, SBXD, sbxd  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not os.path.exists(SBXD), reason="sbxd was not built")


def policy_file(home, sid):
    return os.path.join(str(home), "sandboxes", sid, "net", "policy.json")


def seed(home, sid, policy):
    d = os.path.dirname(policy_file(home, sid))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "policy.json"), "w") as f:
        json.dump(policy, f)


def read_policy(home, sid):
    with open(policy_file(home, sid)) as f:
        return json.load(f)


# ---- sbx net ----

def test_cli_net(sbx):
    p = sbx.run("net", "-t", "nt", "show", check=1)
    assert b"no sandbox for thread nt" in p.stderr, p.stderr
    sbx.ok("exec", "-t", "nt", "--", "true")
    sid = [s for s in sbx.ps() if s["thread"] == "nt"][0]["id"]
    # a sandbox whose network is not egress has no policy: an error, and no file appears
    p = sbx.run("net", "-t", "nt", "allow", "pypi.test", check=1)
    assert b"no egress policy" in p.stderr and b"not egress" in p.stderr, p.stderr
    assert not os.path.exists(policy_file(sbx.home, sid))

    seed(sbx.home, sid, {"defaultAction": "deny", "egress": [{"action": "allow", "target": "old.test"}]})
    assert sbx.ok("net", "-t", "nt", "show") == "default deny\nallow old.test\n"
    out = sbx.ok("net", "-t", "nt", "allow", "PyPI.test.", "*.cdn.test", "10.1.2.3/8", "pypi.test")
    assert out == ("default deny\nallow pypi.test\nallow *.cdn.test\nallow 10.0.0.0/8\n"
                   "allow old.test\n")
    # deny of an existing target moves it first with the new action
    sbx.ok("net", "-t", "nt", "deny", "old.test")
    j = sbx.json("net", "-t", "nt", "--json", "show")
    assert j == {"mode": "enforcing", "policy": {"defaultAction": "deny", "egress": [
        {"action": "deny", "target": "old.test"}, {"action": "allow", "target": "pypi.test"},
        {"action": "allow", "target": "*.cdn.test"}, {"action": "allow", "target": "10.0.0.0/8"}]}}
    assert read_policy(sbx.home, sid) == j["policy"]
    # a bad target is refused by name and changes nothing
    before = open(policy_file(sbx.home, sid)).read()
    p = sbx.run("net", "-t", "nt", "allow", "ok.test", "bad..test", check=1)
    assert b"`bad..test`" in p.stderr and b"empty label" in p.stderr, p.stderr
    assert open(policy_file(sbx.home, sid)).read() == before
    # rm: normalized match, unknown targets ignored
    out = sbx.ok("net", "-t", "nt", "rm", "10.0.0.0/8", "OLD.test", "never.test")
    assert out == "default deny\nallow pypi.test\nallow *.cdn.test\n"
    # the denied log, as the enforcer appends it (a torn last line is skipped)
    assert sbx.ok("net", "-t", "nt", "log") == ""
    log = os.path.join(os.path.dirname(policy_file(sbx.home, sid)), "denied.log")
    with open(log, "w") as f:
        f.write(json.dumps({"ts": 0.5, "sandbox": sid, "kind": "lookup", "target": "evil.test",
                            "rule": "default"}) + "\n")
        f.write(json.dumps({"ts": 86400, "sandbox": sid, "kind": "connect", "target": "10.0.0.1:80",
                            "rule": "always-denied: 10.0.0.0/8"}) + "\n")
        f.write('{"ts": 1, "kind"')
    assert sbx.ok("net", "-t", "nt", "log") == (
        "1970-01-01T00:00:00Z lookup evil.test (default)\n"
        "1970-01-02T00:00:00Z connect 10.0.0.1:80 (always-denied: 10.0.0.0/8)\n")
    assert sbx.ok("net", "-t", "nt", "--json", "log") == open(log).read()
    # usage errors
    assert sbx.run("net", "-t", "nt", "frob", check=2)
    assert b"show takes no TARGET" in sbx.run("net", "-t", "nt", "show", "x", check=2).stderr
    assert b"at least one TARGET" in sbx.run("net", "-t", "nt", "allow", check=2).stderr
    assert sbx.run("net", "show", check=2)
    assert b"sbx net -t THREAD" in sbx.run("net", "--help", check=0).stdout


# ---- sbxd's egress API ----

def egress(server, sb_id, method, body=None, headers=None, auth="token", raw=None):
    ep = server.req("GET", "/v1/sandboxes/%s/endpoints/18080" % sb_id)
    assert ep.status == 200, ep.body
    j = ep.json()
    assert j["endpoint"].endswith("/direct/%s/18080" % sb_id), j
    h = dict(headers or {})
    if auth == "token":
        h.update(j["headers"])
    elif auth == "egress":
        h["OPENSANDBOX-EGRESS-AUTH"] = j["headers"]["OPENSANDBOX-EGRESS-AUTH"]
    elif auth:
        h["X-EXECD-ACCESS-TOKEN"] = auth
    return server.req(method, "/direct/%s/18080/policy" % sb_id, raw if raw is not None else body,
                      h, key=None)


def text_error(r, status, needle):
    assert r.status == status, (r.status, r.body)
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    assert needle in r.body.decode(), r.body


def test_egress_api(sbxd, tmp_path):
    s = sbxd()
    sb = s.create()
    ep = s.req("GET", "/v1/sandboxes/%s/endpoints/18080" % sb.id).json()
    assert set(ep["headers"]) == {"X-EXECD-ACCESS-TOKEN", "OPENSANDBOX-EGRESS-AUTH"}
    # no egress datapath (sandbox.network none): the fixed policy, and no change
    r = egress(s, sb.id, "GET")
    assert r.status == 200, r.body
    j = r.json()
    assert j["status"] == "ok" and j["mode"] == "deny_all" and j["enforcementMode"] == "none"
    assert j["policy"] == {"defaultAction": "deny", "egress": []}
    assert "loopback only" in j["reason"]
    text_error(egress(s, sb.id, "PATCH", [{"action": "allow", "target": "a.test"}]), 409,
               "has no egress policy")
    assert not os.path.exists(policy_file(s.home, sb.id))

    seed(s.home, sb.id, {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.test"}]})
    r = egress(s, sb.id, "GET", auth="egress")
    assert r.status == 200, r.body
    assert r.json() == {"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft",
                        "policy": {"defaultAction": "deny",
                                   "egress": [{"action": "allow", "target": "pypi.test"}]}}
    # PATCH: incoming first, the first rule for a target wins, existing ones kept after
    r = egress(s, sb.id, "PATCH", [{"action": "allow", "target": "example.test"},
                                   {"action": "deny", "target": "example.test"},
                                   {"action": "deny", "target": "PYPI.test"},
                                   {"action": "allow", "target": "192.0.2.0/24"}])
    assert r.status == 200, r.body
    assert r.json() == {"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft"}
    assert read_policy(s.home, sb.id) == {"defaultAction": "deny", "egress": [
        {"action": "allow", "target": "example.test"}, {"action": "deny", "target": "pypi.test"},
        {"action": "allow", "target": "192.0.2.0/24"}]}
    # logged as the sidecar does (egress.updated: the delta)
    for _ in range(100):
        upd = [l for l in s.logs if l.get("msg") == "egress policy updated"]
        if upd:
            break
        time.sleep(0.05)
    assert upd and upd[0]["sandbox_id"] == sb.id and upd[0]["op"] == "patch", upd
    assert upd[0]["delta"][:2] == ["allow example.test", "deny example.test"], upd
    # DELETE: by target, unknown ignored; nothing matched says so
    r = egress(s, sb.id, "DELETE", ["pypi.test", "nope.test"])
    assert r.status == 200 and "reason" not in r.json(), r.body
    r = egress(s, sb.id, "DELETE", ["nope.test"])
    assert r.status == 200 and r.json()["reason"] == "no matching targets found", r.body
    r = egress(s, sb.id, "DELETE", ["example.test", "192.0.2.0/24"])
    assert r.json()["mode"] == "deny_all"
    assert read_policy(s.home, sb.id) == {"defaultAction": "deny", "egress": []}

    # errors: text/plain, naming what was wrong, nothing changed
    before = open(policy_file(s.home, sb.id)).read()
    text_error(egress(s, sb.id, "PATCH", raw=b""), 400, "empty body")
    text_error(egress(s, sb.id, "PATCH", raw=b"[{"), 400, "not JSON")
    text_error(egress(s, sb.id, "PATCH", []), 400, "empty array")
    text_error(egress(s, sb.id, "PATCH", {"action": "allow"}), 400, "must be a JSON array")
    text_error(egress(s, sb.id, "PATCH", [{"action": "allow", "target": "ok.test"},
                                          {"action": "permit", "target": "x.test"}]), 400,
               "patch rules[1].action: must be \"allow\" or \"deny\"")
    text_error(egress(s, sb.id, "PATCH", [{"action": "allow", "target": "10.0.0.0/40"}]), 400,
               "patch rules[0].target: `10.0.0.0/40`")
    text_error(egress(s, sb.id, "PATCH", [{"action": "allow", "target": "a.test", "x": 1}]), 400,
               "patch rules[0].x: unknown field")
    text_error(egress(s, sb.id, "DELETE", [1]), 400, "[0] must be a string")
    text_error(egress(s, sb.id, "DELETE", ["ok.test", "a..b"]), 400, "target 1")
    assert open(policy_file(s.home, sb.id)).read() == before
    text_error(egress(s, sb.id, "GET", auth="wrong"), 401, "unauthorized")
    text_error(egress(s, sb.id, "GET", auth=None), 401, "unauthorized")
    text_error(egress(s, sb.id, "POST", {"defaultAction": "allow"}), 405, "not allowed")
    r = s.req("GET", "/direct/%s/18080/other" % sb.id, headers=ep["headers"], key=None)
    text_error(r, 404, "not found")
    # the API key works too, as for every endpoint
    r = s.req("GET", "/direct/%s/18080/policy" % sb.id, headers={"OPEN-SANDBOX-API-KEY": KEY},
              key=None)
    assert r.status == 200, r.body
    r = s.req("GET", "/direct/0123456789abcdef/18080/policy", headers=ep["headers"], key=None)
    assert r.status == 404  # no such sandbox

    # a large patch under the 1 MiB body cap, then one over
    rules = [{"action": "allow", "target": "h%d.test" % i} for i in range(4096)]
    assert egress(s, sb.id, "PATCH", rules).status == 200
    text_error(egress(s, sb.id, "PATCH", [{"action": "allow", "target": "new.test"}]), 400,
               "at most 4096")
    assert egress(s, sb.id, "PATCH", [{"action": "deny", "target": "h7.test"}]).status == 200
    assert read_policy(s.home, sb.id)["egress"][0] == {"action": "deny", "target": "h7.test"}
    # a declared body over 1 MiB is refused before it is sent (no broken pipe to race with)
    c = s.conn()
    c.putrequest("PATCH", "/direct/%s/18080/policy" % sb.id)
    for k, v in ep["headers"].items():
        c.putheader(k, v)
    c.putheader("Content-Length", str((1 << 20) + 1))
    c.endheaders()
    resp = c.getresponse()
    assert resp.status == 413, (resp.status, resp.read()[:200])
    c.close()

    # the policy survives sbxd's restart (the file is the truth; sbxd adopts the sandbox)
    want = read_policy(s.home, sb.id)
    assert s.stop() == 0
    s2 = sbxd(home=s.home)
    r = egress(s2, sb.id, "GET")
    assert r.status == 200 and r.json()["policy"] == want


def test_egress_metrics(sbxd):
    s = sbxd()
    a, b = s.create(), s.create()
    seed(s.home, a.id, {"defaultAction": "allow", "egress": []})
    with open(os.path.join(os.path.dirname(policy_file(s.home, a.id)), "counters.json"), "w") as f:
        json.dump({"denied_connections": 7, "denied_lookups": 3, "allowed_lookups": 11}, f)
    r = s.req("GET", "/metrics")
    assert r.status == 200, r.body
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.body.decode()
    assert "# TYPE sbx_egress_denied_lookups_total counter" in text
    assert 'sbx_egress_denied_lookups_total{sandbox="%s"} 3\n' % a.id in text
    assert 'sbx_egress_denied_connections_total{sandbox="%s"} 7\n' % a.id in text
    assert 'sbx_egress_allowed_lookups_total{sandbox="%s"} 11\n' % a.id in text
    assert b.id not in text  # no egress policy, no series
    assert s.req("GET", "/metrics", key=None).status == 401


def test_create_network_policy(sbxd):
    s = sbxd()
    body = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "1", "memory": "1Gi"}}

    def create(pol):
        b = dict(body)
        b["networkPolicy"] = pol
        return s.req("POST", "/v1/sandboxes", b)

    r = create({"defaultAction": "deny", "egress": [{"action": "allow", "target": "a..b"}]})
    assert r.status == 400, r.body
    assert r.json()["code"] == "SANDBOX::INVALID_PARAMETER", r.body
    assert "networkPolicy.egress[0].target: `a..b`" in r.json()["message"], r.body
    r = create({"defaultAction": "deny", "egress": [{"action": "allow", "target": "x.test", "port": 1}]})
    assert r.status == 400 and "networkPolicy.egress[0].port: unknown field" in r.json()["message"]
    r = create({"mode": "sometimes"})
    assert r.status == 400 and "mode: `sometimes`" in r.json()["message"], r.body
    # valid, but beyond sandbox.network none
    r = create({"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.test"}]})
    assert r.status == 400 and "sandbox.network: egress" in r.json()["message"], r.body
    # what none gives is accepted, in either shape
    for pol in ({"defaultAction": "deny"}, {"mode": "isolated"}, {}):
        r = create(pol)
        assert r.status == 202, (pol, r.body)
    # sandbox.network host: only what the host's network is (everything allowed) is accepted
    h = sbxd(config="sandbox:\n  network: host\n", home=s.home + "-host")
    body_h = dict(body, networkPolicy={"defaultAction": "deny", "egress": [
        {"action": "allow", "target": "pypi.test"}]})
    r = h.req("POST", "/v1/sandboxes", body_h)
    assert r.status == 400 and r.json()["code"] == "SANDBOX::API_NOT_SUPPORTED", r.body
    assert "sandbox.network: host" in r.json()["message"], r.body
    assert "sandbox.network: egress enforces any policy" in r.json()["message"], r.body
    r = h.req("POST", "/v1/sandboxes", dict(body, networkPolicy={"mode": "open"}))
    assert r.status == 202, r.body
    sid = r.json()["id"]
    r = egress(h, sid, "GET")
    assert r.status == 200 and r.json()["mode"] == "allow_all", r.body
    assert r.json()["enforcementMode"] == "none", r.body
