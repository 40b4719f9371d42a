"""A foreground command lives as long as its client, in sbxd's faces and MCP's: a client that
drops its HTTP connection (execd's streaming /command, the contract API, MCP over HTTP) or an
`sbx mcp` that is killed takes its command with it; a background command stays."""
import json
import os
import socket
import subprocess
import time

from conftest import SBX, slow
from test_sbxd_http import KEY, sbxd  # noqa: F401  (the fixture)


def wait_for(cond, timeout, what):
    deadline = time.time() + slow(timeout)
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(what)


def raw_request(server, method, path, body, headers):
    """Sends a request on a socket of its own and returns the socket (left open)."""
    data = json.dumps(body).encode()
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           "Content-Length: %d\r\n" % (method, path, len(data))
    for k, v in headers.items():
        head += "%s: %s\r\n" % (k, v)
    s = socket.create_connection((server.host, server.port), timeout=slow(60))
    s.sendall(head.encode() + b"\r\n" + data)
    return s


def contract(server, user, thread):
    r = server.req("POST", "/v1/contract/acquire", {"user": user, "thread": thread})
    assert r.status == 200, r.body
    sid = r.json()["sandbox_id"]

    def comms():
        r = server.req("POST", "/v1/sandboxes/%s/contract/execute_command" % sid,
                       {"command": "ps -eo comm="})
        assert r.status == 200, r.body
        return r.json()["stdout"].split()
    return sid, comms


def test_execd_command_ends_with_its_client(sbxd):  # noqa: F811
    s = sbxd()
    sb = s.create()

    def comms():
        out, last = sb.run("ps -eo comm=")
        return " ".join(out).split()

    for command, name in (("sleep 1000", "sleep"), ("yes", "yes")):
        sock = raw_request(s, "POST", sb.prefix + "/command", {"command": command},
                           {"X-EXECD-ACCESS-TOKEN": sb.token})
        assert sock.recv(12).startswith(b"HTTP/1.1 200")
        wait_for(lambda: name in comms(), 20, "%s did not start" % name)
        sock.close()
        wait_for(lambda: name not in comms(), 20, "%s outlived its client" % name)
    # a background command is not its client's: it stays
    sock = raw_request(s, "POST", sb.prefix + "/command",
                       {"command": "exec sleep 999", "background": True},
                       {"X-EXECD-ACCESS-TOKEN": sb.token})
    assert sock.recv(12).startswith(b"HTTP/1.1 200")
    wait_for(lambda: "sleep" in comms(), 20, "the background sleep did not start: %s" % comms())
    sock.close()
    time.sleep(1)
    assert "sleep" in comms()


def test_contract_and_mcp_http_commands_end_with_their_client(sbxd):  # noqa: F811
    s = sbxd()
    sid, comms = contract(s, "alice", "drop")
    sock = raw_request(s, "POST", "/v1/sandboxes/%s/contract/execute_command" % sid,
                       {"command": "sleep 1000"}, {"OPEN-SANDBOX-API-KEY": KEY})
    wait_for(lambda: "sleep" in comms(), 20, "sleep did not start")
    sock.close()
    wait_for(lambda: "sleep" not in comms(), 20, "the contract's sleep outlived its client")

    # MCP over HTTP: a tools/call whose connection drops is cancelled
    hdr = {"Authorization": "Bearer " + KEY, "Accept": "application/json, text/event-stream",
           "Sbx-User": "alice", "Sbx-Thread": "drop"}
    r = s.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "t", "version": "1"}}},
              headers=hdr, key=None)
    assert r.status == 200, r.body
    hdr["Mcp-Session-Id"] = r.headers["mcp-session-id"]
    assert s.req("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 headers=hdr, key=None).status == 202
    for progress in (False, True):  # answered as JSON, or as an event stream
        params = {"name": "execute_command", "arguments": {"command": "yes > /dev/null"}}
        if progress:
            params["_meta"] = {"progressToken": "p"}
        sock = raw_request(s, "POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                               "params": params}, hdr)
        wait_for(lambda: "yes" in comms(), 20, "yes did not start")
        sock.close()
        wait_for(lambda: "yes" not in comms(), 20, "MCP's yes outlived its client")


def test_mcp_stdio_command_ends_with_the_server(sbx):
    """`sbx mcp` killed (its client gone with it) while a call runs: the command ends."""
    proc = subprocess.Popen(sbx.cmd("mcp", "-t", "mk"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        def send(msg):
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            proc.stdin.flush()
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}})
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "execute_command", "arguments": {"command": "sleep 1000"}}})

        def sleeping():
            r = sbx.sh("mk", "ps -eo comm=")
            return "sleep" in r["stdout"].split()
        wait_for(sleeping, 30, "sleep did not start")
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: not sleeping(), 20, "the MCP call's sleep outlived sbx mcp")


def test_mcp_stdio_command_ends_when_the_client_closes_its_end(sbx):
    """The client closes the pipe it reads our answers from (and keeps stdin open): the call
    running is cancelled, its command killed, and sbx mcp ends."""
    proc = subprocess.Popen(sbx.cmd("mcp", "-t", "mc"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        def send(msg):
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            proc.stdin.flush()
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}})
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "execute_command", "arguments": {"command": "sleep 1000"}}})

        def sleeping():
            return "sleep" in sbx.sh("mc", "ps -eo comm=")["stdout"].split()
        wait_for(sleeping, 30, "sleep did not start")
        proc.stdout.close()
        wait_for(lambda: not sleeping(), 20, "the MCP call's sleep outlived its client")
        assert proc.wait(timeout=slow(30)) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()


def test_aio_bash_exec_ends_with_its_client(tmp_path):
    """AIO's /v1/bash/exec (DeerFlow's AioSandboxProvider) whose client drops: the command
    ends; the shell session's /v1/shell/exec, whose commands outlive a request by design
    (view, wait, kill), is not watched."""
    import test_provisioner as tp
    base = tmp_path / "deer-flow"
    (base / "threads").mkdir(parents=True)
    env = dict(os.environ, PROVISIONER_API_KEY=tp.PKEY, THREADS_HOST_PATH=str(base / "threads"),
               DEER_FLOW_HOST_BASE_DIR=str(base))
    server = tp.Server(tmp_path / "home", env)
    try:
        a = server.create("w1")

        def comms():
            return a.ok("POST", "/v1/bash/exec", {"command": "ps -eo comm="})["stdout"].split()
        data = json.dumps({"command": "sleep 1000"}).encode()
        sock = socket.create_connection((a.host, a.port), timeout=slow(60))
        sock.sendall(b"POST %s/v1/bash/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n%s" % (a.prefix.encode(), len(data), data))
        wait_for(lambda: "sleep" in comms(), 20, "sleep did not start")
        sock.close()
        wait_for(lambda: "sleep" not in comms(), 20, "bash/exec's sleep outlived its client")
    finally:
        server.stop()
        subprocess.run([SBX, "--home", str(tmp_path / "home"), "down"], capture_output=True,
                       timeout=120)


def test_background_commands_that_end_at_once_are_seen_ending(sbxd):  # noqa: F811
    """A background command outlives the connection thread of sbx-init that started it, and is
    then reaped by PID 1's main thread: its end must still reach its record (it stayed
    `running` for ever, and PID 1 spun on its pidfd, for about a third of entrypoints that exit
    at once). Ten sandboxes whose entrypoint exits 3 at once all end Failed with code 3."""
    s = sbxd()
    ids = []
    for _ in range(10):
        r = s.req("POST", "/v1/sandboxes", {"image": {"uri": "host"}, "resourceLimits": {},
                                            "entrypoint": ["sh", "-c", "exit 3"], "timeout": 600})
        assert r.status == 202, r.body
        ids.append(r.json()["id"])
    states = {}

    def all_failed():
        states.update({i: s.req("GET", "/v1/sandboxes/" + i).json()["status"] for i in ids})
        return all(st["state"] == "Failed" for st in states.values())
    wait_for(all_failed, 20, "entrypoints that exited were not seen ending")
    assert all("exited with code 3" in st["message"] for st in states.values()), states
    for i in ids:
        assert s.req("DELETE", "/v1/sandboxes/" + i).status == 204
