"""grep cannot run forever (docs/security.md, "Resources"): a backtracking regex on one line
used to spin a thread of sbx-init at 100% CPU for as long as it liked, the deadline being looked
at only between lines, and on after its client had given up. The positive control: while the
client waits, the pattern really does burn a CPU (so the check after it is not vacuous). Then
the client goes away, and the burning must stop at once; and the sandbox serves again."""
import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse

import sbxsec
from sbxsec import WS

EVIL = r"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x"
TICK = os.sysconf("SC_CLK_TCK")
WINDOW = 3.0  # seconds each CPU rate is measured over


def _children():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _cpu(pid, kids, reaped):
    """CPU seconds of pid (all its threads), with its reaped children if asked."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    t = int(v[11]) + int(v[12]) + ((int(v[13]) + int(v[14])) if reaped else 0)
    return t / TICK + sum(_cpu(k, kids, False) for k in kids.get(pid, []))


def sandbox_cpu(pid):
    """CPU seconds used so far by sbx-init (pid) and every process below it."""
    return _cpu(pid, _children(), True)


def test_grep_backtracking_stops_with_its_client(sbx):
    thread = sbxsec.new_thread("grep")
    line = "x" + "a" * 300
    r = sbx.sh(thread, "mkdir -p %s && printf '%%s\\n' '%s' > %s/evil.txt" % (WS, line, WS))
    assert r["exit_code"] == 0, r
    pid = sbxsec.sandbox_pid(sbx, thread)
    assert pid

    # (rates, not absolute times: the host's CPUs may be shared with other work)
    client = sbxsec.spawn_cli(sbx, "grep", "-t", thread, WS, EVIL, "--json")
    try:
        time.sleep(1.0)
        c0 = sandbox_cpu(pid)
        time.sleep(WINDOW)
        burning = (sandbox_cpu(pid) - c0) / WINDOW
        assert client.poll() is None, "the search ended on its own: no positive control"
        print("while the client waits: %.2f CPU" % burning)
        assert burning > 0.1, burning  # positive control: the pattern does burn a CPU
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    time.sleep(1.0)  # the search looks at its client every 20 ms
    c1 = sandbox_cpu(pid)
    time.sleep(WINDOW)
    after = (sandbox_cpu(pid) - c1) / WINDOW
    print("after the client went away: %.2f CPU" % after)
    assert after < burning / 4, "sbx-init still burns %.2f CPU for a client that has gone" % after

    # the sandbox still serves, searches included
    p = sbx.run("grep", "-t", thread, WS, "xa+$", "--json", check=0)
    assert b'"line_number": 1' in p.stdout or b'"line_number":1' in p.stdout, p.stdout


SEARCH_TIMEOUT = 30  # include/sbx/sbx.h's SBX_SEARCH_TIMEOUT: every search's default deadline


def _sbxd(home, env):
    """sbxd on home (the CLI's pool), on an ephemeral loopback port: (process, port)."""
    p = subprocess.Popen([sbxsec.SBXD, "--listen", "127.0.0.1:0", "--home", home,
                          "--api-key", "grep-key"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    for line in p.stderr:
        rec = json.loads(line)
        if rec.get("msg") == "listening":
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(rec["address"].rsplit(":", 1)[1])
    raise AssertionError("sbxd did not start")


def _post(port, path, body, headers, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, json.dumps(body), dict(headers, **{"Content-Type": "application/json"}))
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def _mcp_grep(sbx, thread, timeout):
    """grep through `sbx mcp -t THREAD` (MCP over stdio): its structuredContent."""
    p = subprocess.Popen(sbx.cmd("mcp", "-t", thread), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "sec", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "grep", "arguments": {"path": WS, "pattern": EVIL}}}]
    try:
        for m in msgs:
            p.stdin.write(json.dumps(m) + "\n")
        p.stdin.flush()
        for line in p.stdout:
            m = json.loads(line)
            if m.get("id") == 2:
                return m["result"]["structuredContent"], m["result"]["content"][0]["text"]
        raise AssertionError("sbx mcp gave no answer")
    finally:
        p.stdin.close()
        p.wait(timeout)


def test_grep_ends_by_default_in_every_face(sbx):
    """Issue 28.6: no caller passes a deadline, yet every face's grep answers (truncated) by the
    default one, and leaves nothing of the search running in the sandbox: the CLI, MCP over
    stdio, sbxd's contract route and its AIO route (a provisioner sandbox), all at once."""
    thread = sbxsec.new_thread("grepd")
    line = "x" + "a" * 300
    r = sbx.sh(thread, "mkdir -p %s && printf '%%s\\n' '%s' > %s/evil.txt" % (WS, line, WS))
    assert r["exit_code"] == 0, r
    pid = sbxsec.sandbox_pid(sbx, thread)
    env = dict(os.environ, PROVISIONER_API_KEY="prov-key")
    env.pop("THREADS_HOST_PATH", None)
    d, port = _sbxd(sbx.home, env)
    results, errors = {}, []
    limit = SEARCH_TIMEOUT * 4 + 120  # a bound for the test not to hang: far above the deadline

    def face(name, fn):
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            errors.append("%s: %r" % (name, e))

    try:
        key = {"OPEN-SANDBOX-API-KEY": "grep-key"}
        st, j = _post(port, "/v1/contract/acquire", {"user": "default", "thread": thread}, key, 60)
        assert st == 200, j
        sid = j["sandbox_id"]
        # the AIO API of a provisioner sandbox on the same thread folder (no THREADS_HOST_PATH:
        # the scope's own folder), so it sees the same file
        st, j = _post(port, "/api/sandboxes", {"sandbox_id": "grepd-aio", "thread_id": thread},
                      {"X-API-Key": "prov-key"}, 60)
        assert st == 200, j
        aio = urllib.parse.urlsplit(j["sandbox_url"]).path
        ps = json.loads(sbx.run("ps", "--json").stdout)["sandboxes"]
        pids = [pid] + [x["pid"] for x in ps if x["id"] == aio.split("/")[2]]
        assert len(pids) == 2, ps

        def cli():
            p = sbx.run("grep", "-t", thread, WS, EVIL, "--json", timeout=limit)
            assert p.returncode == 0, p.stderr
            return json.loads(p.stdout)

        def contract():
            st, j = _post(port, "/v1/sandboxes/%s/contract/grep" % sid,
                          {"path": WS, "pattern": EVIL}, key, limit)
            assert st == 200, j
            return j

        def aio_grep():
            st, j = _post(port, aio + "/v1/file/grep", {"path": WS, "pattern": EVIL}, {}, limit)
            assert st == 200, j
            return {"matches": j["data"]["matches"], "truncated": j["data"]["truncated"]}

        def mcp():
            sc, text = _mcp_grep(sbx, thread, limit)
            assert text.startswith("Results truncated while searching under %s" % WS), text
            return sc

        threads = [threading.Thread(target=face, args=a) for a in
                   (("cli", cli), ("mcp", mcp), ("contract", contract), ("aio", aio_grep))]
        for t in threads:
            t.start()
        time.sleep(2.0)
        c0 = sum(sandbox_cpu(p) for p in pids)
        time.sleep(WINDOW)
        burning = (sum(sandbox_cpu(p) for p in pids) - c0) / WINDOW
        assert all(t.is_alive() for t in threads), "a search ended at once: no positive control"
        print("while the searches run: %.2f CPU" % burning)
        assert burning > 0.1, burning  # positive control: the pattern does burn CPU
        for t in threads:
            t.join(limit)
            assert not t.is_alive(), "a face's grep did not come back"
        assert not errors, errors
        for name in ("cli", "mcp", "contract", "aio"):
            assert results[name] == {"matches": [], "truncated": True}, (name, results[name])
        # nothing left spinning: sbx-init's worker is gone with the deadline
        time.sleep(1.0)
        c1 = sum(sandbox_cpu(p) for p in pids)
        time.sleep(WINDOW)
        after = (sum(sandbox_cpu(p) for p in pids) - c1) / WINDOW
        print("after the answers: %.2f CPU" % after)
        assert after < burning / 4, "the sandboxes still burn %.2f CPU after answering" % after
        # a caller's own deadline is kept (the CLI's --timeout), and the text form says why
        p = sbx.run("grep", "-t", thread, WS, EVIL, "--timeout", "1", timeout=limit)
        assert p.returncode == 0 and p.stdout == b"", p
        assert b"ran out of time" in p.stderr, p.stderr
    finally:
        d.terminate()
        d.wait(60)
