"""What an agent reads, through every face: the CLI (plain and --json), MCP over a real stdio
pipe and over sbxd's HTTP, and sbxd's contract, AIO and OpenSandbox routes.

- Output with NUL bytes and invalid UTF-8 arrives whole everywhere: a NUL stays a NUL (JSON
  \\u0000), as DeerFlow's providers keep it (bytes.decode("utf-8", errors="replace")), and an
  invalid byte is U+FFFD; nothing after either is dropped.
- The sandbox.*_output_max_chars caps are applied to the text MCP's tools return, with
  DeerFlow's truncation notes and head/tail split.
- `sbx mcp` answers every request it read before the end of its input, then exits."""
import json
import os
import subprocess

import pytest

from conftest import SBX, slow
from test_sbxd_http import Server, Sandbox, parse_events

# printf's octal escapes: abc NUL def 0xff 0xfe ghi; then a line after it all
PROBE = r"printf 'abc\000def\377\376ghi\n'; printf 'e\000r' >&2; echo tail"
RAW_OUT = b"abc\0def\xff\xfeghi\ntail\n"
OUT = RAW_OUT.decode("utf-8", errors="replace")  # what DeerFlow's providers make of the bytes
ERR = "e\0r"
RENDERED = OUT + "\nStd Error:\n" + ERR  # execute_command's text (contract §1.1)


class Mcp:
    """`sbx mcp` over a real pipe: one JSON-RPC message a line."""

    def __init__(self, home, *args, config=None):
        argv = [SBX, "--home", str(home)] + (["--config", config] if config else []) + ["mcp"]
        self.p = subprocess.Popen(argv + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.next_id = 0

    @staticmethod
    def msg(mid, method, params=None):
        m = {"jsonrpc": "2.0", "method": method}
        if mid is not None:
            m["id"] = mid
        if params is not None:
            m["params"] = params
        return (json.dumps(m) + "\n").encode()

    @staticmethod
    def init_lines():
        return (Mcp.msg(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "t", "version": "1"}})
                + Mcp.msg(None, "notifications/initialized"))

    def start(self):
        self.p.stdin.write(self.init_lines())
        self.p.stdin.flush()
        assert json.loads(self.p.stdout.readline())["id"] == 0

    def call(self, name, **args):
        self.next_id += 1
        self.p.stdin.write(self.msg(self.next_id, "tools/call", {"name": name, "arguments": args}))
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        assert r["id"] == self.next_id, r
        return r["result"]

    def close(self):
        self.p.stdin.close()
        rest = self.p.stdout.read()
        code = self.p.wait(slow(60))
        return code, rest


def text_of(result):
    return "".join(c["text"] for c in result["content"] if c["type"] == "text")


@pytest.fixture
def server(tmp_path):
    started = []

    def start(**kw):
        env = dict(os.environ)
        env.pop("OPEN_SANDBOX_API_KEY", None)
        s = Server(kw.get("home") or (tmp_path / "sbxd-home"), ["--api-key", "test-key"], env)
        started.append(s)
        return s

    yield start
    try:
        for s in started:
            assert s.stop() == 0, [l for l in s.logs if "raw" in l][-30:]
    finally:
        for s in started:
            subprocess.run([SBX, "--home", s.home, "down"], capture_output=True, timeout=120)


def test_nul_and_invalid_utf8_in_the_cli(sbx):
    # plain: the bytes as written, on stdout and stderr
    p = sbx.run("exec", "-t", "faces", "--", PROBE, check=0)
    assert p.stdout == RAW_OUT and p.stderr == b"e\0r"
    # --json: every field whole, the NUL escaped (\u0000), invalid bytes U+FFFD
    p = sbx.run("exec", "-t", "faces", "--json", "--", PROBE, check=0)
    assert b"\\u0000def" in p.stdout
    j = json.loads(p.stdout)
    assert (j["output"], j["stdout"], j["stderr"]) == (RENDERED, OUT, ERR)


def test_nul_and_invalid_utf8_in_mcp_stdio(sbx):
    m = Mcp(sbx.home, "-t", "faces-mcp")
    try:
        m.start()
        r = m.call("execute_command", command=PROBE + "; exit 3")
        assert text_of(r) == RENDERED + "\nExit Code: 3" and r["isError"] is True
        # a file with a NUL is binary to read_file (DeerFlow's rule): said, not cut
        m.call("update_file", path="/mnt/user-data/workspace/nul.txt",
               content_base64="YWIAY2T/ZWY=")  # b"ab\0cd\xffef"
        r = m.call("read_file", path="/mnt/user-data/workspace/nul.txt")
        assert r["isError"] is True and "appears to be a binary file" in text_of(r)
    finally:
        code, _ = m.close()
    assert code == 0


def test_nul_and_invalid_utf8_in_sbxd(server):
    s = server()
    # the contract API
    r = s.req("POST", "/v1/contract/acquire", {"user": "u", "thread": "faces"})
    assert r.status == 200, r.body
    sid = r.json()["sandbox_id"]
    r = s.req("POST", "/v1/sandboxes/%s/contract/execute_command" % sid, {"command": PROBE})
    assert r.status == 200, r.body
    j = r.json()
    assert (j["output"], j["stdout"], j["stderr"]) == (RENDERED, OUT, ERR)
    assert s.req("POST", "/v1/contract/release", {"sandbox_id": sid}).status == 204
    # OpenSandbox's execd: the stdout events of /command, joined
    sb = s.create()
    evs = sb.events(PROBE)
    assert "".join(e["text"] for e in evs if e["type"] == "stdout") == OUT.replace("\n", "")
    assert "".join(e["text"] for e in evs if e["type"] == "stderr") == ERR
    # the AIO sandbox API: bash/exec (pipes) and shell/exec (a terminal)
    aio = "/aio/%s/%s" % (sb.id, sb.token)
    r = s.req("POST", aio + "/v1/bash/exec", {"command": PROBE}, key=None)
    assert r.status == 200, r.body
    d = r.json()["data"]
    assert (d["stdout"], d["stderr"]) == (OUT, ERR)
    r = s.req("POST", aio + "/v1/shell/exec", {"command": PROBE}, key=None)
    assert r.status == 200, r.body
    assert r.json()["data"]["output"].replace("\r", "") == OUT.replace("tail", ERR + "tail"), r.body
    # MCP over HTTP
    h = {"Accept": "application/json, text/event-stream"}
    r = s.req("POST", "/mcp", json.loads(Mcp.init_lines().split(b"\n")[0]), h)
    assert r.status == 200, r.body
    h["Mcp-Session-Id"] = r.headers["mcp-session-id"]
    assert s.req("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, h).status == 202
    r = s.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "execute_command", "arguments": {"command": PROBE}}}, h)
    assert r.status == 200, r.body
    assert text_of(r.json()["result"]) == RENDERED
    assert s.req("DELETE", "/mcp", None, h).status in (200, 204)


CAPS = "sandbox:\n  bash_output_max_chars: 100\n  read_file_output_max_chars: 120\n  ls_output_max_chars: 200\n"


def deerflow_middle(s, m):
    """DeerFlow's _truncate_bash_output (deerflow/sandbox/tools.py), for the expected text."""
    if m == 0 or len(s) <= m:
        return s
    kept = max(0, m - len("\n... [middle truncated: %d chars skipped] ...\n" % len(s)))
    if kept == 0:
        return s[:m]
    head, tail = kept // 2, kept - kept // 2
    return s[:head] + "\n... [middle truncated: %d chars skipped] ...\n" % (len(s) - kept) + s[-tail:]


def deerflow_head(s, m, hint):
    """DeerFlow's _truncate_read_file_output / _truncate_ls_output."""
    if m == 0 or len(s) <= m:
        return s
    kept = max(0, m - len("\n... [truncated: showing first %d of %d chars. %s] ..." % (len(s), len(s), hint)))
    if kept == 0:
        return s[:m]
    return s[:kept] + "\n... [truncated: showing first %d of %d chars. %s] ..." % (kept, len(s), hint)


def test_mcp_output_caps(sbx, tmp_path):
    cfg = tmp_path / "caps.yaml"
    cfg.write_text(CAPS)
    m = Mcp(sbx.home, "-t", "caps", config=str(cfg))
    try:
        m.start()
        # 300 characters, some of them two bytes, with the NUL and U+FFFD of above in the tail
        cmd = "for i in $(seq 1 30); do printf '%03d-h\\303\\251-' $i; done; " + PROBE
        full = "".join("%03d-hé-" % i for i in range(1, 31)) + RENDERED
        got = text_of(m.call("execute_command", command=cmd))
        assert got == deerflow_middle(full, 100) and len(got) <= 100
        assert got.endswith(ERR)  # the tail is kept
        # under the cap: whole
        assert text_of(m.call("execute_command", command="echo short")) == "short\n"
        # read_file: the head, and DeerFlow's hint
        body = "".join("line %03d\n" % i for i in range(40))
        m.call("write_file", path="/mnt/user-data/workspace/long.txt", content=body)
        got = text_of(m.call("read_file", path="/mnt/user-data/workspace/long.txt"))
        assert got == deerflow_head(body, 120, "Use start_line/end_line to read a specific range")
        assert got.startswith("line 000\n") and len(got) <= 120
        # list_dir: the head of the listing
        m.call("execute_command", command="mkdir -p /mnt/user-data/workspace/d && cd /mnt/user-data/workspace/d "
               "&& for i in $(seq 100 140); do touch file-$i; done")
        full = text_of(m.call("list_dir", path="/mnt/user-data/workspace/d", max_depth=1))
        assert full.startswith("/mnt/user-data/workspace/d") and "truncated: showing first" in full
        assert full.endswith("Use a more specific path to see fewer results] ...") and len(full) <= 200
    finally:
        code, _ = m.close()
    assert code == 0
    # without the config, the defaults (20000 for bash) let 300 characters through whole
    m = Mcp(sbx.home, "-t", "caps")
    try:
        m.start()
        assert len(text_of(m.call("execute_command", command="head -c 30000 /dev/zero | tr '\\0' x"))) == 20000
    finally:
        m.close()


def test_mcp_stdio_answers_every_request_before_eof(sbx):
    """printf '<initialize>...<tools/call>' | sbx mcp: the call is answered, then sbx exits."""
    lines = Mcp.init_lines()
    lines += Mcp.msg(1, "tools/call", {"name": "execute_command", "arguments": {"command": "sleep 1; echo first"}})
    lines += Mcp.msg(2, "tools/call", {"name": "execute_command", "arguments": {"command": "echo second"}})
    lines += Mcp.msg(3, "tools/list")
    r, w = os.pipe()
    os.write(w, lines)
    os.close(w)  # the end of input is there before sbx reads the first line
    p = subprocess.run([SBX, "--home", sbx.home, "mcp", "-t", "eof"], stdin=r, capture_output=True,
                       timeout=slow(120))
    os.close(r)
    assert p.returncode == 0, p.stderr
    answers = {m["id"]: m for m in map(json.loads, p.stdout.decode().splitlines())}
    assert sorted(answers) == [0, 1, 2, 3], p.stdout
    assert text_of(answers[1]["result"]) == "first\n"
    assert text_of(answers[2]["result"]) == "second\n"
