"""sbxd-specific attacks (docs/security.md, "What a client of sbxd may do"). Each test starts its
own sbxd on 127.0.0.1 (a free port) over a fresh home, attacks it as an HTTP client (or from
inside one of its sandboxes), and fails if the attack works: host files through the files API,
routes without the API key, a non-loopback listener without a key, host volumes outside
sbxd.volume_roots (also by racing the mount), the port proxy reaching host services, unbounded
bodies, headers and slow clients, other sandboxes' ids and tokens, and a sandbox dying under a
stream or an upload.

Every sbxd started here must still be running at the end of its test, stop with status 0 and
leave no sanitizer report in its log. The tests skip while $SBX_BUILD/sbxd does not exist."""
import http.client
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid

import pytest

import sbxsec
from sbxsec import WS

pytestmark = pytest.mark.skipif(not os.path.exists(sbxsec.SBXD),
                                reason="%s is not built" % sbxsec.SBXD)

KEY = "sbx-sec-key-%s" % uuid.uuid4().hex
OWN = object()  # Daemon.req: send the daemon's own key (if it has one)
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
KEY_HEADER = "OPEN-SANDBOX-API-KEY"
MADE_UP = "0123456789abcdef"
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|Thread)Sanitizer|runtime error:")


# ---- a small HTTP client of sbxd (stdlib only) ----

class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def code(self):
        try:
            return self.json().get("code")
        except ValueError:
            return None

    def __repr__(self):
        return "<%d %r>" % (self.status, self.body[:300])


class Daemon:
    """One sbxd on 127.0.0.1:0 over home tmp_path/name, started with --api-key key (if any),
    --config (if config is given, as YAML text) and extra environment."""

    def __init__(self, tmp_path, name, key=None, config=None, env=None, args=()):
        self.home = str(tmp_path / name)
        os.mkdir(self.home)
        self.key = key
        self.log_path = str(tmp_path / (name + ".log"))
        argv = [sbxsec.SBXD, "--listen", "127.0.0.1:0", "--home", self.home] + list(args)
        if key:
            argv += ["--api-key", key]
        if config is not None:
            cfg = tmp_path / (name + ".yaml")
            cfg.write_text(config)
            argv += ["--config", str(cfg)]
        e = dict(os.environ)
        e.pop("OPEN_SANDBOX_API_KEY", None)
        e.update(env or {})
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=e)
        self.port = None
        end = time.time() + 20
        while self.port is None and time.time() < end and self.proc.poll() is None:
            time.sleep(0.05)
            m = re.search(r'"msg":"listening","address":"127\.0\.0\.1:(\d+)"', self.logs())
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.proc.kill()
            raise AssertionError("sbxd did not start: %s" % self.logs()[-2000:])
        self.pid = self.proc.pid

    def logs(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, key=OWN, timeout=30):
        h = dict(headers or {})
        if key is OWN:
            key = self.key
        if key is not None:
            h[KEY_HEADER] = key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            try:
                body = r.read()
            except http.client.IncompleteRead as e:
                raise AssertionError("%s %s: %d, then the body was cut short after %d bytes"
                                     % (method, path, r.status, len(e.partial)))
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, body)
        finally:
            c.close()

    def create(self, **kw):
        body = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
                "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "timeout": 600}
        body.update(kw)
        r = self.req("POST", "/v1/sandboxes", body)
        assert r.status == 202, r
        return Box(self, r.json()["id"])

    def ids(self):
        r = self.req("GET", "/v1/sandboxes?pageSize=200")
        assert r.status == 200, r
        return sorted(i["id"] for i in r.json()["items"])

    def ps(self):
        p = subprocess.run([sbxsec.SBX, "--home", self.home, "ps", "--json"],
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["sandboxes"]

    def init_pid(self, sid):
        return next(x["pid"] for x in self.ps() if x["id"] == sid)

    def status_value(self, field):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def rss_kib(self):
        return self.status_value("VmRSS")

    def threads(self):
        return self.status_value("Threads")

    def assert_healthy(self):
        assert self.proc.poll() is None, "sbxd died: %s" % self.logs()[-3000:]
        t0 = time.monotonic()
        r = self.req("GET", "/health", key=None, timeout=10)
        assert r.status == 200, r
        assert time.monotonic() - t0 < 5

    def stop(self):
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = "hung on SIGTERM"
        subprocess.run([sbxsec.SBX, "--home", self.home, "down"], capture_output=True, timeout=120)
        self.log.close()
        return alive, code


class Box:
    """A sandbox made through the lifecycle API, with its access token."""

    def __init__(self, daemon, sid):
        self.d, self.id = daemon, sid
        r = daemon.req("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)
        assert r.status == 200, r
        self.token = r.json()["headers"][TOKEN_HEADER]
        self.prefix = "/direct/%s/44772" % sid

    def req(self, method, path, body=None, headers=None, token=True, **kw):
        h = dict(headers or {})
        if token:
            h[TOKEN_HEADER] = self.token
        return self.d.req(method, self.prefix + path, body, h, key=None, **kw)

    def events(self, command, timeout=60, **fields):
        r = self.req("POST", "/command", dict(fields, command=command), timeout=timeout)
        assert r.status == 200, r
        return parse_events(r.body)

    def sh(self, command, **kw):
        """(stdout lines, exit code) of a command (-1 if it did not end normally)."""
        evs = self.events(command, **kw)
        out = [e["text"] for e in evs if e["type"] == "stdout"]
        last = evs[-1]
        if last["type"] == "execution_complete":
            return out, 0
        return out, int(last["error"]["evalue"]) if last["type"] == "error" else -1

    def upload(self, path, data, expect=200):
        body, ctype = multipart([("metadata", "metadata", json.dumps({"path": path}).encode()),
                                 ("file", os.path.basename(path) or "f", data)])
        r = self.req("POST", "/files/upload", body, {"Content-Type": ctype})
        if expect is not None:
            assert r.status == expect, r
        return r

    def background(self, command):
        evs = self.events(command, background=True)
        assert evs[-1]["type"] == "execution_complete", evs
        return evs[0]["text"]


def parse_events(raw):
    """execd's event stream: one line of JSON per event, each followed by a blank line."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-300:]
    return [json.loads(c) for c in text[:-2].split("\n\n")]


def multipart(parts, boundary="sbxsecboundary"):
    out = b""
    for name, filename, data in parts:
        out += b"--%s\r\n" % boundary.encode()
        out += b'Content-Disposition: form-data; name="%s"; filename="%s"\r\n' % (
            name.encode(), filename.encode())
        out += b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
    out += b"--%s--\r\n" % boundary.encode()
    return out, "multipart/form-data; boundary=" + boundary


def q(path):
    return urllib.parse.quote(path, safe="")


def raw_exchange(port, data, timeout=10, read_limit=1 << 16):
    """Sends raw bytes (stopping quietly if the server closes), then reads what comes back until
    the server closes or timeout: (bytes, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while len(out) < read_limit and not _complete(out):
                d = s.recv(65536)
                if not d:
                    break
                out += d
        except OSError:
            pass
        return out, time.monotonic() - t0
    finally:
        s.close()


def _complete(raw):
    """True once raw holds a whole response with a Content-Length body."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    m = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
    return bool(sep and m and len(body) >= int(m.group(1)))


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None


def wait_for(fn, timeout=10, interval=0.1):
    end = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > end:
            return v
        time.sleep(interval)


@pytest.fixture
def sbxd_factory(tmp_path):
    """start(name="sbxd", key=None, config=None, env=None) -> a running Daemon; each is checked
    and stopped at the end."""
    started = []

    def start(name="sbxd", **kw):
        d = Daemon(tmp_path, name, **kw)
        started.append(d)
        return d

    yield start
    problems = []
    for d in started:
        alive, code = d.stop()
        log = d.logs()
        if not alive:
            problems.append("sbxd %s died during the test" % d.home)
        if code != 0:
            problems.append("sbxd %s exited with %s" % (d.home, code))
        m = SANITIZER_REPORT.search(log)
        if m:
            problems.append("sanitizer report from sbxd: %s" % log[max(0, m.start() - 200):][:3000])
    assert not problems, problems


@pytest.fixture
def sbxd(sbxd_factory):
    return sbxd_factory()


# ---- N6 ----

def test_sbxd_port_unreachable_from_inside(sbxd, make_sbx, probe_bin):
    """A sandbox can never talk to the sbxd that serves it (its loopback is private)."""
    s = make_sbx()
    prober = sbxsec.Prober(s, probe_bin)
    thread = sbxsec.new_thread("sbxd")
    res, _ = prober.run(thread, "connect_tcp", "127.0.0.1", sbxd.port)
    assert res["connect_tcp"] != "ok"
    # nor can one of sbxd's own sandboxes
    box = sbxd.create()
    out, code = box.sh("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected" % sbxd.port)
    assert "connected" not in out and code != 0


# ---- 1. files API: traversal and magic links ----

def test_sbxd_files_api_refuses_traversal_and_magic_links(sbxd_factory, host_secret, tmp_path):
    """Every execd files route (download, download by lines, info, list, search, upload, mkdir,
    delete, rmdir, mv, permissions, replace) and the contract's file ops, with paths that climb
    (`../..`, `~/..`), go through magic links (/proc/self/fd/N, /proc/1/root, /proc/self/cwd,
    /proc/thread-self/root) or through symlinks to `/` and `/proc/1/root` that the sandbox
    planted: the answer is 4xx or the sandbox's own content; host secrets (files in /root, /tmp,
    /var/tmp, /home and the test's folder, and a marker in sbxd's environment) never show up,
    and no host file is read, written, moved, re-moded or removed."""
    marker, secrets = host_secret
    env_marker = "SBX-SEC-SBXD-ENV-%s" % uuid.uuid4().hex
    d = sbxd_factory(env={"SBX_SEC_ENV_MARKER": env_marker})
    box = d.create()
    pwned = "sbx-sec-pwned-%d" % os.getpid()
    victim = tmp_path / "victim-dir"
    victim.mkdir()
    (victim / "keep.txt").write_text(marker + "\n")
    modes = {p: os.stat(p).st_mode for p in secrets}
    out, code = box.sh("ln -s / %s/esc && ln -s /proc/1/root %s/p1 && ln -s /proc/self/fd %s/fds"
                       " && ln -s /proc/1/cwd %s/cwd1 && cat /etc/passwd" % (WS, WS, WS, WS))
    assert code == 0, out
    sandbox_passwd = "".join(l + "\n" for l in out)
    host_shadow = ""
    try:
        with open("/etc/shadow") as f:
            host_shadow = f.readline().strip()
    except OSError:
        pass
    seen = []

    def check(r, what, host_path=None):
        seen.append(what)
        body = r.body.decode(errors="replace")
        assert marker not in body, (what, r)
        assert env_marker not in body, (what, r)
        if host_shadow:
            assert host_shadow not in body, (what, r)
        if host_path and r.status < 300:
            # a listing or search that shows the secret's name reached the host's folder
            assert os.path.basename(host_path) not in body, (what, r)
        return r

    def climbs(p):
        """Spellings of host path p that must stay inside the sandbox."""
        return ["../../../.." + p, p, "~/../../.." + p, "$HOME/../../.." + p,
                "/proc/self/root" + p, "/proc/thread-self/root" + p, "/proc/1/root" + p,
                "/proc/1/cwd" + p, "/proc/self/cwd/../../../.." + p,
                WS + "/esc" + p, WS + "/p1" + p, WS + "/cwd1" + p, WS + "/esc/proc/1/root" + p]

    # reads of each host secret, in every spelling: not found, or refused
    for secret in secrets:
        folder = os.path.dirname(secret)
        for v in climbs(secret):
            r = check(box.req("GET", "/files/download?path=" + q(v)), ("download", v))
            assert 400 <= r.status < 500, (v, r)
            r = check(box.req("GET", "/files/download?offset=1&path=" + q(v)), ("lines", v))
            assert 400 <= r.status < 500, (v, r)
            r = check(box.req("GET", "/files/info?path=" + q(v)), ("info", v))
            assert 400 <= r.status < 500, (v, r)
        for v in climbs(folder):
            check(box.req("GET", "/directories/list?depth=2&path=" + q(v)), ("list", v), secret)
            check(box.req("GET", "/files/search?pattern=*sbx-sec*&path=" + q(v)), ("search", v),
                  secret)

    # magic links to sbx-init's descriptors, environment and memory
    for n in range(16):
        for v in ("/proc/self/fd/%d" % n, "/proc/1/fd/%d" % n, "/proc/thread-self/fd/%d" % n,
                  WS + "/fds/%d" % n):
            r = check(box.req("GET", "/files/download?path=" + q(v)), ("download", v))
            assert 400 <= r.status < 500, (v, r)
            r = check(box.req("GET", "/files/download?offset=1&path=" + q(v)), ("lines", v))
            assert 400 <= r.status < 500, (v, r)
            r = check(box.req("GET", "/files/info?path=" + q(v)), ("info", v))
            # lstat of the link itself is the sandbox's own metadata, nothing beyond it
            assert 400 <= r.status < 500 or r.json()[v]["type"] == "symlink", (v, r)
            check(box.req("GET", "/directories/list?path=" + q(v)), ("list", v))
            check(box.req("GET", "/files/search?pattern=*&path=" + q(v)), ("search", v))
    for v in ("/proc/self/environ", "/proc/1/environ", "/proc/self/mem", "/proc/1/mem",
              "/proc/self/exe", "/proc/1/exe", "/proc/self/cwd", "/proc/1/root", "/proc/1/cwd",
              "/proc/self/maps", "/proc/1/cmdline"):
        check(box.req("GET", "/files/download?path=" + q(v)), ("download", v))
        check(box.req("GET", "/files/download?offset=1&path=" + q(v)), ("lines", v))
        check(box.req("GET", "/directories/list?path=" + q(v)), ("list", v))

    # /etc/shadow and /etc/passwd by every route are the sandbox's (none, and the generated one)
    for v in ("/etc/shadow", "../../etc/shadow", "/proc/1/root/etc/shadow", WS + "/esc/etc/shadow",
              WS + "/p1/etc/shadow"):
        r = check(box.req("GET", "/files/download?path=" + q(v)), ("download", v))
        assert 400 <= r.status < 500, (v, r)
    for v in ("../../etc/passwd", WS + "/esc/etc/passwd", "/etc/./passwd", "~/../etc/passwd"):
        r = check(box.req("GET", "/files/download?path=" + q(v)), ("download", v))
        assert r.status == 200 and r.body.decode() == sandbox_passwd, (v, r)
    r = check(box.req("GET", "/directories/list?depth=1&path=" + q(WS + "/esc/root")), "esc/root")
    assert r.status == 200 and r.json() == [], r

    # writes and changes aimed at host folders and files
    for secret in secrets:
        folder = os.path.dirname(secret)
        for v in climbs(folder):
            check(box.upload(v + "/" + pwned, b"planted", expect=None), ("upload", v))
            check(box.req("POST", "/directories", {v + "/" + pwned + ".d": {"mode": 777}}),
                  ("mkdir", v))
        for v in climbs(secret):
            check(box.req("POST", "/files/permissions", {v: {"mode": 777}}), ("chmod", v))
            check(box.req("POST", "/files/replace", {v: {"old": marker, "new": "PWNED"}}),
                  ("replace", v))
            check(box.req("POST", "/files/mv", [{"src": v, "dest": WS + "/stolen"}]), ("mv", v))
            check(box.req("DELETE", "/files?path=" + q(v)), ("delete", v))
    for v in climbs(str(victim)):
        check(box.req("DELETE", "/directories?path=" + q(v)), ("rmdir", v))
        check(box.req("DELETE", "/files?path=" + q(v + "/keep.txt")), ("delete", v))
    r = box.req("GET", "/files/download?path=" + q(WS + "/stolen"))
    assert r.status == 404 or marker.encode() not in r.body, r

    # the contract's file operations on the planted links
    cpath = "/v1/sandboxes/%s/contract/" % box.id
    for secret in secrets:
        folder = os.path.dirname(secret)
        for link in ("/esc", "/p1"):
            for op, body in (("read_file", {"path": WS + link + secret}),
                             ("download_file", {"path": WS + link + secret}),
                             ("list_dir", {"path": WS + link + folder, "max_depth": 1}),
                             ("glob", {"path": WS + link + folder, "pattern": "*sbx-sec*"}),
                             ("grep", {"path": WS + link + folder, "pattern": marker}),
                             ("write_file", {"path": WS + link + folder + "/" + pwned,
                                             "content": "planted"})):
                check(d.req("POST", cpath + op, body), (op, body["path"]), secret)

    # the host is untouched
    for p in secrets:
        with open(p) as f:
            assert f.read() == marker + "\n", p
        assert os.stat(p).st_mode == modes[p], p
        folder = os.path.dirname(p)
        assert not os.path.exists(os.path.join(folder, pwned)), folder
        assert not os.path.exists(os.path.join(folder, pwned + ".d")), folder
    assert (victim / "keep.txt").read_text() == marker + "\n"
    assert box.req("GET", "/ping").status == 200
    d.assert_healthy()
    print("files API: %d requests, no host data" % len(seen))


# ---- 2. the API key ----

def _routes(box):
    """(method, path, body) of every kind of route, on sandbox box."""
    sid = box.id
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7200))
    create = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
              "resourceLimits": {"cpu": "1", "memory": "1Gi"}}
    routes = []
    for v in ("/v1", ""):
        routes += [
            ("GET", v + "/sandboxes", None),
            ("POST", v + "/sandboxes", create),
            ("GET", v + "/sandboxes/%s" % sid, None),
            ("DELETE", v + "/sandboxes/%s" % sid, None),
            ("PATCH", v + "/sandboxes/%s/metadata" % sid, {"owner": "mallory"}),
            ("POST", v + "/sandboxes/%s/pause" % sid, None),
            ("POST", v + "/sandboxes/%s/resume" % sid, None),
            ("POST", v + "/sandboxes/%s/renew-expiration" % sid, {"expiresAt": future}),
            ("GET", v + "/sandboxes/%s/endpoints/44772" % sid, None),
            ("GET", v + "/sandboxes/%s/endpoints/8000?use_server_proxy=true" % sid, None),
            ("POST", v + "/sandboxes/%s/snapshots" % sid, {}),
            ("GET", v + "/snapshots", None),
            ("POST", v + "/metrics/events", {"eventType": "x"}),
            ("GET", v + "/no/such/route", None),
            ("POST", v + "/contract/acquire", {"user": "mallory", "thread": "t-evil"}),
            ("POST", v + "/contract/acquire", {}),
            ("POST", v + "/contract/release", {"sandbox_id": sid}),
            ("POST", v + "/sandboxes/%s/contract/execute_command" % sid,
             {"command": "touch /tmp/pwned-contract"}),
            ("POST", v + "/sandboxes/%s/contract/read_file" % sid, {"path": "/etc/passwd"}),
            ("POST", v + "/sandboxes/%s/contract/write_file" % sid,
             {"path": WS + "/pwned", "content": "x"}),
        ]
    upload, ctype = multipart([("metadata", "metadata", b'{"path":"/tmp/pwned-upload"}'),
                               ("file", "f", b"pwned")])
    for prefix in ("/direct/%s/44772", "/sandboxes/%s/proxy/44772", "/v1/sandboxes/%s/proxy/44772"):
        p = prefix % sid
        routes += [
            ("GET", p + "/ping", None),
            ("POST", p + "/command", {"command": "touch /tmp/pwned-command"}),
            ("POST", p + "/command", {"command": "touch /tmp/pwned-bg", "background": True}),
            ("DELETE", p + "/command?id=x", None),
            ("GET", p + "/command/status/x", None),
            ("GET", p + "/command/x/logs", None),
            ("POST", p + "/session", {}),
            ("GET", p + "/files/info?path=/tmp/keep", None),
            ("GET", p + "/files/download?path=/etc/passwd", None),
            ("GET", p + "/files/search?path=/tmp&pattern=*", None),
            ("POST", p + "/files/upload", (upload, ctype)),
            ("DELETE", p + "/files?path=/tmp/keep", None),
            ("POST", p + "/files/mv", [{"src": "/tmp/keep", "dest": "/tmp/moved"}]),
            ("POST", p + "/files/permissions", {"/tmp/keep": {"mode": 777}}),
            ("POST", p + "/files/replace", {"/tmp/keep": {"old": "keep", "new": "pwned"}}),
            ("GET", p + "/directories/list?path=/", None),
            ("POST", p + "/directories", {"/tmp/pwned-dir": {}}),
            ("DELETE", p + "/directories?path=/tmp", None),
            ("GET", p + "/metrics", None),
            ("GET", p + "/metrics/watch", None),
            ("GET", p + "/proxy/8000/", None),
            ("GET", p + "/nothing", None),
        ]
    for p in ("/direct/%s/8000/" % sid, "/sandboxes/%s/proxy/8000/" % sid,
              "/v1/sandboxes/%s/proxy/8000/x?y=1" % sid, "/direct/%s/18080/" % sid):
        routes += [("GET", p, None), ("POST", p, "payload")]
    return routes


def _send(d, method, path, body, headers):
    h = dict(headers)
    if isinstance(body, tuple):
        body, ctype = body
        h["Content-Type"] = ctype
    return d.req(method, path, body, h, key=None, timeout=20)


APP = r'''
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = sys.argv[2].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = reply
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def _start_app(box, port, body):
    """An HTTP app inside box on its loopback port, answering body; waits until sbxd reaches it."""
    box.upload("/tmp/app.py", APP.encode())
    box.background("exec python3 /tmp/app.py %d %s" % (port, body))
    path = "/direct/%s/%d/" % (box.id, port)
    r = wait_for(lambda: (lambda r: r if r.status == 200 else None)(
        box.d.req("GET", path, headers={TOKEN_HEADER: box.token}, key=None)), timeout=15)
    assert r and r.body == body.encode(), r


def test_sbxd_requires_the_api_key_when_one_is_set(sbxd_factory):
    """With a key (--api-key; also from $OPEN_SANDBOX_API_KEY and sbxd.api_key), every route
    but /health (lifecycle, contract, unknown paths, and every execd and port-proxy route of a
    real sandbox, in all three endpoint forms) answers 401 without credentials, with a wrong key
    (empty, truncated, extended, another case, in another header or in the query string) and,
    on endpoints, with a wrong or another sandbox's access token; none of those requests creates,
    changes, runs or deletes anything. With the key (or, on endpoints, the token) they work.
    (The key is compared in constant time, src/daemon/parse.c sbxd_secret_equal; a timing test
    over loopback would only be noise.)"""
    d = sbxd_factory(key=KEY)
    box, other = d.create(metadata={"owner": "alice"}), d.create()
    box.upload("/tmp/keep", b"keep")
    _start_app(box, 8000, "app-body")
    before = {"ids": d.ids(), "ps": sorted(x["id"] for x in d.ps()),
              "box": d.req("GET", "/v1/sandboxes/" + box.id).json()}
    routes = _routes(box)
    wrong_keys = [{}, {KEY_HEADER: ""}, {KEY_HEADER: "wrong"}, {KEY_HEADER: KEY[:-1]},
                  {KEY_HEADER: KEY + "x"}, {KEY_HEADER: KEY.upper()}, {KEY_HEADER: KEY[1:]},
                  {"Authorization": "Bearer " + KEY}, {"X-API-Key": KEY},
                  {"OPEN_SANDBOX_API_KEY": KEY}]
    wrong_tokens = [{TOKEN_HEADER: ""}, {TOKEN_HEADER: "0" * 64}, {TOKEN_HEADER: box.token[:-1]},
                    {TOKEN_HEADER: box.token + "0"}, {TOKEN_HEADER: box.token.upper()},
                    {TOKEN_HEADER: other.token}, {TOKEN_HEADER: KEY}, {KEY_HEADER: box.token}]
    n = 0
    for method, path, body in routes:
        endpoint = path.startswith(("/direct/", "/sandboxes/%s/proxy" % box.id,
                                    "/v1/sandboxes/%s/proxy" % box.id))
        creds = wrong_keys + (wrong_tokens if endpoint else [])
        for h in creds:
            r = _send(d, method, path, body, h)
            n += 1
            assert r.status == 401, (method, path, h, r)
            if "/18080/" in path:  # the egress API's port: its spec's plain-text 401
                assert r.body == b"unauthorized\n", (method, path, h, r)
                continue
            assert r.code() in (("UNAUTHORIZED",) if endpoint else
                                ("MISSING_API_KEY", "INVALID_API_KEY")), (method, path, h, r)
        sep = "&" if "?" in path else "?"
        r = _send(d, method, path + sep + "OPEN-SANDBOX-API-KEY=" + q(KEY), body, {})
        assert r.status == 401, (method, path, "query", r)
    # /health is the one open route
    assert d.req("GET", "/health", key=None).status == 200

    # nothing was created, changed, run or deleted
    assert d.ids() == before["ids"]
    assert sorted(x["id"] for x in d.ps()) == before["ps"]
    assert d.req("GET", "/v1/sandboxes/" + box.id).json() == before["box"]
    assert not os.path.exists(os.path.join(d.home, "users", "mallory"))
    out, code = box.sh("ls /tmp /mnt/user-data/workspace; cat /tmp/keep")
    assert code == 0 and out[-1] == "keep", out
    assert not [l for l in out if "pwned" in l or "moved" in l], out
    assert box.req("GET", "/files/info?path=/tmp/keep").json()["/tmp/keep"]["mode"] == 644

    # the key opens everything; the token opens its own sandbox's endpoints
    assert d.req("GET", "/v1/sandboxes").status == 200
    assert d.req("GET", box.prefix + "/ping").status == 200
    assert d.req("GET", "/sandboxes/%s/proxy/44772/ping" % box.id).status == 200
    r = d.req("POST", box.prefix + "/command", {"command": "echo via-key"})
    assert r.status == 200 and "via-key" in r.body.decode(), r
    assert d.req("GET", "/direct/%s/8000/" % box.id).body == b"app-body"
    assert box.req("GET", "/ping").status == 200
    assert d.req("GET", "/direct/%s/8000/" % box.id, key=None,
                 headers={TOKEN_HEADER: box.token}).body == b"app-body"
    assert d.req("POST", "/v1/metrics/events", {"eventType": "x"}).status == 204
    r = d.req("POST", "/v1/sandboxes/%s/contract/execute_command" % other.id,
              {"command": "echo contract"})
    assert r.status == 200 and r.json()["stdout"] == "contract\n", r
    # a token is not a key: it opens no lifecycle or contract route
    for h in ({TOKEN_HEADER: box.token}, {KEY_HEADER: box.token}):
        assert d.req("GET", "/v1/sandboxes", headers=h, key=None).status == 401
    print("API key: %d refused requests" % n)

    # the key may come from the environment or the configuration: the same promise holds
    for name, kw in (("env", {"env": {"OPEN_SANDBOX_API_KEY": KEY + "-env"}}),
                     ("cfg", {"config": "sbxd:\n  api_key: %s-cfg\n" % KEY})):
        e = sbxd_factory(name=name, **kw)
        for path in ("/v1/sandboxes", "/v1/contract/release", "/direct/%s/44772/ping" % MADE_UP):
            assert e.req("GET", path, key=None).status in (401, 404)
        assert e.req("GET", "/v1/sandboxes", key=None).status == 401
        assert e.req("GET", "/v1/sandboxes", key=KEY).status == 401
        assert e.req("GET", "/v1/sandboxes", key="%s-%s" % (KEY, name)).status == 200


# ---- 3. non-loopback listeners ----

def test_sbxd_refuses_non_loopback_without_a_key(tmp_path):
    """`--listen` (or sbxd.listen) on a wildcard or any non-loopback address without an API key
    (none given, or an empty one by flag, environment or configuration) exits with status 2 and
    an error naming the address and the missing key, before it binds anything or touches its
    home."""
    env = dict(os.environ)
    env.pop("OPEN_SANDBOX_API_KEY", None)
    cases = [(["--listen", a], a, env) for a in
             ("0.0.0.0:0", "[::]:0", ":0", "[::ffff:127.0.0.1]:0", "[::ffff:0.0.0.0]:0",
              "192.0.2.1:0", "[2001:db8::1]:0")]
    # (`localhost` is accepted: sbxd takes the name for 127.0.0.1 itself, never from /etc/hosts
    # or DNS, so it cannot be made to mean another address; test_edges.py binds it)
    empty = dict(env, OPEN_SANDBOX_API_KEY="")
    cases += [(["--listen", "0.0.0.0:0", "--api-key", ""], "0.0.0.0:0", env),
              (["--listen", "0.0.0.0:0"], "0.0.0.0:0", empty)]
    for i, text in enumerate(("sbxd:\n  listen: 0.0.0.0:0\n",
                              "sbxd:\n  listen: \"[::]:0\"\n  api_key: \"\"\n")):
        cfg = tmp_path / ("listen-%d.yaml" % i)
        cfg.write_text(text)
        cases.append((["--config", str(cfg)], "0.0.0.0:0" if i == 0 else "[::]:0", env))
    for n, (args, addr, e) in enumerate(cases):
        home = tmp_path / ("home-%d" % n)
        t0 = time.monotonic()
        p = subprocess.run([sbxsec.SBXD, "--home", str(home)] + args, env=e, capture_output=True,
                           timeout=30)
        err = p.stderr.decode(errors="replace")
        assert p.returncode == 2, (args, p.returncode, err)
        assert "refusing to listen on %s without an API key" % addr in err, (args, err)
        assert '"msg":"listening"' not in err, (args, err)
        assert not home.exists(), (args, "the home was touched before the refusal")
        assert time.monotonic() - t0 < 10
    # loopback without a key is fine (the other tests run so); [::1] too where IPv6 exists
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return
    p = subprocess.Popen([sbxsec.SBXD, "--listen", "[::1]:0", "--home", str(tmp_path / "h6")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = p.stderr.readline().decode()
        while line and '"listening"' not in line:
            line = p.stderr.readline().decode()
        assert '"address":"[::1]:' in line, line
    finally:
        p.terminate()
        assert p.wait(30) == 0


# ---- 4. volumes ----

def test_sbxd_volumes_stay_under_volume_roots(sbxd_factory, probe_bin, tmp_path, host_secret):
    """Host volumes outside sbxd.volume_roots, under a look-alike prefix, with `..` (in the path
    or subPath), not normalised, or through a symlink inside a root (planted on the host or by a
    sandbox through a mounted volume, also in a named volume's subPath) are refused 4xx and
    create nothing; an allowed one is mounted at its mount path only, read-only when asked.

    And the race: sandbox A, with the root's folder mounted read-write, swaps a directory with a
    symlink to `/` (renameat2 RENAME_EXCHANGE, in a loop) while sandboxes are created with that
    directory as a host volume (and as a named volume's subPath). sbxd checks the path without
    following symlinks, but the launcher mounts it by path again; no sandbox may ever get the
    host's `/` (regression: one in a few did, before sbxd checked that each mount is the
    directory it walked)."""
    marker, secrets = host_secret
    root = tmp_path / "vols"
    (root / "data").mkdir(parents=True)
    os.chmod(root / "data", 0o777)
    (root / "data" / "marker.txt").write_text("in-root\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(marker + "\n")
    os.symlink(str(outside), str(root / "escape"))
    os.symlink("/", str(root / "to-slash"))
    (tmp_path / "vols-evil").mkdir()
    d = sbxd_factory(config="sbxd:\n  volume_roots: [%s]\n" % root)

    # sandbox A: the root's folder read-write (it plants symlinks there), a named volume
    a = d.create(volumes=[
        {"name": "d", "host": {"path": str(root / "data")}, "mountPath": "/mnt/d"},
        {"name": "p", "pvc": {"claimName": "shared"}, "mountPath": "/mnt/p"}])
    out, code = a.sh("ln -s / /mnt/d/planted && ln -s %s /mnt/d/planted-out && ln -s / /mnt/p/link"
                     " && mkdir -p /mnt/d/race/d /mnt/p/race/d && ln -s / /mnt/d/race/l"
                     " && ln -s / /mnt/p/race/l && echo ok" % outside)
    assert out == ["ok"], out

    def vol(path=None, **kw):
        v = {"name": "x", "mountPath": "/x"}
        if path is not None:
            v["host"] = {"path": path}
        v.update(kw)
        return v

    refused = [
        [vol(str(outside))], [vol("/etc")], [vol("/")], [vol(str(tmp_path))],
        [vol(str(tmp_path / "vols-evil"))], [vol(str(tmp_path / "vols-evil" / "new"))],
        [vol(str(root) + "-evil")], [vol(str(root) + "/../outside")], [vol(str(root) + "/..")],
        [vol(str(root) + "/data/../../outside")], [vol(str(root) + "//data")],
        [vol(str(root) + "/data/")], [vol("vols/data")], [vol("")],
        [vol(str(root / "escape"))], [vol(str(root / "escape" / "new"))],
        [vol(str(root / "to-slash"))], [vol(str(root / "to-slash") + secrets[0])],
        [vol(str(root / "data" / "planted"))], [vol(str(root / "data" / "planted" / "etc"))],
        [vol(str(root / "data" / "planted-out"))],
        [vol(str(root), subPath="../outside")], [vol(str(root), subPath="/etc")],
        [vol(str(root), subPath="escape")], [vol(str(root), subPath="data/planted")],
        [vol(str(root), subPath="data/planted/etc")], [vol(str(root), subPath="data/../..")],
        [vol(pvc={"claimName": "shared"}, subPath="link")],
        [vol(pvc={"claimName": "shared"}, subPath="link/etc")],
        [vol(pvc={"claimName": "shared"}, subPath="../../..")],
        [vol(pvc={"claimName": "../x"})], [vol(pvc={"claimName": "a/b"})],
        [vol(str(root / "data"), mountPath="/proc/x")],
        [vol(str(root / "data"), mountPath="/mnt/user-data/x")],
        [vol(str(root / "data"), mountPath="/")], [vol(str(root / "data"), mountPath="/x/../..")],
        # a valid new folder next to a bad one: neither is created (all are checked first)
        [vol(str(root / "fresh" / "new")), dict(vol(str(root / "escape")), name="y",
                                                mountPath="/y")],
    ]
    listing = sorted(os.listdir(outside))
    ids = d.ids()
    for vols in refused:
        r = d.req("POST", "/v1/sandboxes", {"image": {"uri": "host"}, "entrypoint": ["true"],
                                            "resourceLimits": {}, "volumes": vols})
        assert 400 <= r.status < 500, (vols, r)
        assert r.code().startswith(("VOLUME::", "SANDBOX::VALIDATION")), (vols, r)
    assert d.ids() == ids
    assert sorted(os.listdir(outside)) == listing
    assert not (root / "fresh").exists() and not (root / "escape" / "new").exists()
    assert not (tmp_path / "vols-evil" / "new").exists()

    # an allowed volume: mounted where asked, read-only when asked, nothing more
    b = d.create(volumes=[
        {"name": "ro", "host": {"path": str(root / "data")}, "mountPath": "/srv/ro",
         "readOnly": True},
        {"name": "rw", "host": {"path": str(root / "data" / "sub")}, "mountPath": "/srv/rw"}])
    out, code = b.sh("cat /srv/ro/marker.txt; echo hi > /srv/rw/w && echo wrote;"
                     " touch /srv/ro/pwned 2>/dev/null || echo ro-refused;"
                     " mount -o remount,rw /srv/ro 2>/dev/null || echo remount-refused;"
                     " touch /srv/ro/pwned 2>/dev/null || echo still-ro;"
                     " rm -f /srv/ro/marker.txt 2>/dev/null || echo rm-refused;"
                     " cat /srv/ro/../../%s/secret.txt /srv/rw/../../../outside/secret.txt"
                     " /srv/ro/planted-out/secret.txt /srv/ro/planted%s 2>/dev/null;"
                     " ls /srv; grep -c ' /srv/ro ro[, ]' /proc/self/mountinfo"
                     % (outside, secrets[0]))
    assert marker not in " ".join(out), out
    assert out[:6] == ["in-root", "wrote", "ro-refused", "remount-refused", "still-ro",
                       "rm-refused"], out
    assert out[6:] == ["ro", "rw", "1"], out
    assert (root / "data" / "sub" / "w").read_text() == "hi\n"
    assert not (root / "data" / "pwned").exists() and (root / "data" / "marker.txt").exists()
    # a mount path through the sandbox's own symlinks (/var/tmp -> ../tmp) is no escape
    c = d.create(volumes=[{"name": "v", "host": {"path": str(root / "data")},
                           "mountPath": "/var/tmp/v", "readOnly": True}])
    assert c.sh("cat /tmp/v/marker.txt") == (["in-root"], 0)

    # the race: A swaps race/d (a folder) with race/l (a symlink to /) in both volumes
    with open(probe_bin, "rb") as f:
        a.upload("/tmp/probe", f.read())
    assert a.sh("chmod 755 /tmp/probe && echo ok")[0] == ["ok"]
    swappers = [a.background("/tmp/probe swap %s 20" % p) for p in ("/mnt/d/race", "/mnt/p/race")]
    time.sleep(0.3)
    host_secret_rel = secrets[0].lstrip("/")
    stats = {"made": 0, "symlink": 0, "changed": 0}
    t0 = time.monotonic()
    for i in range(200):
        if time.monotonic() - t0 > 8 or (i >= 40 and stats["made"] + stats["changed"] >= 12):
            break
        v = (vol(str(root / "data" / "race" / "d"), readOnly=True) if i % 2 == 0 else
             vol(pvc={"claimName": "shared"}, subPath="race/d", readOnly=True))
        r = d.req("POST", "/v1/sandboxes", {"image": {"uri": "host"},
                                            "entrypoint": ["tail", "-f", "/dev/null"],
                                            "resourceLimits": {}, "volumes": [v]})
        if r.status == 202:
            stats["made"] += 1
            c = Box(d, r.json()["id"])
            listed = c.req("GET", "/directories/list?depth=1&path=/x")
            seen = c.req("GET", "/files/download?path=" + q("/x/" + host_secret_rel))
            d.req("DELETE", "/v1/sandboxes/" + c.id)
            assert listed.status == 200 and listed.json() == [], ("host / mounted", v, listed)
            assert seen.status == 404 and marker.encode() not in seen.body, ("host / mounted", v)
        else:
            assert r.status == 400 and r.code() == "VOLUME::INVALID_HOST_PATH", r
            # seen by the walk (a symlink; "not a directory" if swapped back meanwhile), or
            # found mounted in the new sandbox in the walked directory's place
            changed = "changed while it was mounted" in r.json()["message"]
            stats["changed" if changed else "symlink"] += 1
    print("volume race: %r in %.1f s" % (stats, time.monotonic() - t0))
    for cid in swappers:
        assert a.req("GET", "/command/status/" + cid).json()["running"], "a swapper stopped"
    # the race was really run: some attempts got past the walk, some did not
    assert stats["made"] + stats["changed"] >= 1, stats
    assert stats["symlink"] >= 1, stats
    assert sorted(os.listdir(outside)) == listing
    d.assert_healthy()


# ---- 5. the port proxy ----

class _HostService:
    """An HTTP service on the host's 127.0.0.1 that must never be reached through sbxd."""

    def __init__(self, body):
        self.body, self.hits = body, []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def reply(self):
                outer.hits.append((self.command, self.path))
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            do_GET = do_POST = do_CONNECT = reply

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_sbxd_port_proxy_reaches_only_the_sandbox(sbxd_factory):
    """Port P of a sandbox is the sandbox's own loopback port P: with a host service on
    127.0.0.1:P (and another on Q) and a different app inside the sandbox on P, every proxy form
    reaches the sandbox's app; port Q (nothing inside) is 502, never the host's; a second
    sandbox's proxy on P reaches nothing (502), and the first one's token does not open it; an
    unknown sandbox is 404; absolute-form requests, CONNECT and Host-header games never make sbxd
    a forward proxy. The host services count no request at all."""
    secret = ("HOST-SERVICE-SECRET-%s" % uuid.uuid4().hex).encode()
    services = [_HostService(secret), _HostService(secret)]
    try:
        p, qport = services[0].port, services[1].port
        d = sbxd_factory()
        box, other = d.create(), d.create()
        _start_app(box, p, "sandbox-app")
        tok = {TOKEN_HEADER: box.token}
        results = []

        def get(method, path, headers=tok, body=None):
            r = d.req(method, path, body, headers, key=None)
            assert secret not in r.body, (path, r)
            results.append(r)
            return r

        for prefix in ("/direct/%s/%d" % (box.id, p), "/sandboxes/%s/proxy/%d" % (box.id, p),
                       "/v1/sandboxes/%s/proxy/%d" % (box.id, p),
                       "/direct/%s/44772/proxy/%d" % (box.id, p),
                       "/sandboxes/%s/proxy/44772/proxy/%d" % (box.id, p)):
            for method in ("GET", "POST"):
                r = get(method, prefix + "/x", body=b"b" if method == "POST" else None)
                assert r.status == 200 and r.body == b"sandbox-app", (prefix, r)
            r = get("GET", prefix + "/", headers=dict(tok, Host="127.0.0.1:%d" % p))
            assert r.body == b"sandbox-app", r
        for path in ("/direct/%s/%d/" % (box.id, qport),
                     "/sandboxes/%s/proxy/%d/" % (box.id, qport),
                     "/direct/%s/44772/proxy/%d/" % (box.id, qport)):
            for h in (tok, dict(tok, Host="127.0.0.1:%d" % qport,
                                **{"X-Forwarded-Host": "127.0.0.1:%d" % qport})):
                r = get("GET", path, headers=h)
                assert r.status == 502, (path, r)
        # another sandbox: its own port P has nothing; box's token does not open it
        r = get("GET", "/direct/%s/%d/" % (other.id, p), headers={TOKEN_HEADER: other.token})
        assert r.status == 502, r
        r = get("GET", "/direct/%s/%d/" % (other.id, p))
        assert r.status == 401, r
        for path in ("/direct/%s/%d/" % (MADE_UP, p), "/sandboxes/%s/proxy/%d/" % (MADE_UP, p),
                     "/direct/%s/%d/" % (MADE_UP, qport)):
            assert get("GET", path).status == 404, path
        for port in ("0", "65536", "-1", "%d.0" % p, "0x%x" % p, " %d" % p, "%d " % p):
            r = get("GET", "/direct/%s/%s/" % (box.id, q(port)))
            assert r.status in (400, 404, 502) or r.body == b"sandbox-app", (port, r)
        # sbxd is not a forward proxy
        host = b"Host: 127.0.0.1:%d\r\n%s: %s\r\nConnection: close\r\n\r\n" % (
            qport, TOKEN_HEADER.encode(), box.token.encode())
        for head, expect in ((b"GET http://127.0.0.1:%d/ HTTP/1.1\r\n%s" % (qport, host), 404),
                             (b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n%s" % (qport, host), 404),
                             (b"GET http://127.0.0.1:%d/direct/%s/%d/ HTTP/1.1\r\n%s"
                              % (qport, box.id.encode(), qport, host), 404),
                             (b"GET /direct/%s/%d/ HTTP/1.1\r\n%s" % (box.id.encode(), qport, host),
                              502)):
            raw, _ = raw_exchange(d.port, head, timeout=10)
            assert secret not in raw, raw
            assert status_of(raw) in (expect, 400), raw[:300]
        # nor can the sandbox itself reach the host's services
        out, code = box.sh("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected" % qport)
        assert "connected" not in out
        assert [s.hits for s in services] == [[], []], [s.hits for s in services]
        d.assert_healthy()
    finally:
        for s in services:
            s.close()


# ---- 6. bodies, headers, slow clients ----

def _drip(port, head, body_chunks, max_bytes, timeout=20):
    """Sends head then chunks until sbxd closes or max_bytes: (bytes sent, response, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sent = 0
    try:
        s.sendall(head)
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
                sent += len(chunk)
                if sent >= max_bytes or time.monotonic() - t0 > timeout:
                    break
        except OSError:
            pass
        s.settimeout(3)
        out = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
        except OSError:
            pass
        return sent, out, time.monotonic() - t0
    finally:
        s.close()


def test_sbxd_request_bodies_and_headers_are_bounded(sbxd_factory):
    """A declared Content-Length over a route's cap (2 GiB on JSON routes, 5 GiB on an upload,
    absurd values) is refused at once, before the body is read; a chunked body that never ends
    is cut off (after the cap plus 64 MiB drained), also with a bogus chunk size; 10,000 headers,
    an 8 MiB header line and an 8 MiB request target are refused; 200 slow clients (headers or
    bodies trickled a few bytes at a time) do not keep others from being answered promptly.
    sbxd's memory and thread count stay bounded throughout. (Floods of connections, per
    address and in all, and slow heads past sbxd.head_timeout: test_sec_limits.py.)"""
    d = sbxd_factory()
    box = d.create()
    tok = "%s: %s\r\n" % (TOKEN_HEADER, box.token)
    rss0, threads0 = d.rss_kib(), d.threads()
    peak = [rss0]
    cut = []

    def sample():
        peak[0] = max(peak[0], d.rss_kib())

    # declared sizes over the cap: refused before the body
    upload = tok + "Content-Type: multipart/form-data; boundary=B\r\n"
    for method, path, extra, size in (("POST", "/v1/sandboxes", "", 2 << 30),
                                      ("POST", "/v1/contract/acquire", "", 2 << 30),
                                      ("POST", box.prefix + "/command", tok, 2 << 30),
                                      ("POST", box.prefix + "/files/mv", tok, 2 << 30),
                                      ("POST", box.prefix + "/files/upload", upload, 5 << 30),
                                      ("GET", box.prefix + "/ping", tok, 2 << 30),
                                      ("GET", "/health", "", 2 << 30),
                                      ("POST", "/v1/sandboxes", "", 10 ** 30)):
        head = ("%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n{\"a\":" % (method, path, extra, size)).encode()
        raw, secs = raw_exchange(d.port, head, timeout=10)
        assert status_of(raw) in ((400, 413) if size > 1 << 40 else
                                  (200, 413) if path == "/health" else (413,)), (path, raw[:300])
        assert secs < 5, (path, secs)
    sample()

    # chunked bodies that never end: cut off after the cap + 64 MiB
    block = b"x" * (1 << 20)
    chunk = b"%x\r\n%s\r\n" % (len(block), block)
    for path, extra, cap in (("/v1/sandboxes", "", 1 << 20),
                             (box.prefix + "/command", tok, 16 << 20)):
        head = ("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" % (path, extra)).encode()
        sent, raw, secs = _drip(d.port, head, iter(lambda: chunk, None), 512 << 20)
        sample()
        cut.append(sent >> 20)
        assert sent < cap + (64 << 20) + (64 << 20), (path, sent >> 20, "MiB accepted")
        assert status_of(raw) in (None, 413), raw[:300]
        assert secs < 15
    for size_line in (b"FFFFFFFFFFFFFFFFFFFF", b"-1", b"1;" + b"e" * 100000, b"zz"):
        head = b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = iter([size_line + b"\r\n"] + [block] * 200)
        sent, raw, secs = _drip(d.port, head, chunks, 200 << 20)
        # (MHD answers a chunk line larger than its buffer with its own 500)
        assert status_of(raw) in (None, 400, 413, 500), (size_line[:30], raw[:300])
        assert sent < 100 << 20 and secs < 15, (size_line[:30], sent, secs)

    # headers
    for head in (b"GET /health HTTP/1.1\r\nHost: x\r\n" +
                 b"".join(b"X-H-%05d: v\r\n" % i for i in range(10000)) + b"\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"a: b\r\n" * 10000 + b"\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * (8 << 20) + b"\r\n\r\n",
                 b"GET /health?" + b"y" * (8 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\nX-Fold: a\r\n" + b" b\r\n" * 50000 + b"\r\n"):
        raw, secs = raw_exchange(d.port, head, timeout=10)
        assert status_of(raw) in (None, 400, 413, 414, 431), raw[:300]
        assert secs < 5
    sample()

    # slow clients: 100 trickle headers, 100 trickle a declared body; others are served meanwhile
    slow = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        if i % 2:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        else:
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      b"\r\nContent-Length: 100000\r\n\r\n{")
        slow.append(s)
    latencies = []
    try:
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:
            for s in slow:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            t0 = time.monotonic()
            assert d.req("GET", "/health", timeout=5).status == 200
            latencies.append(time.monotonic() - t0)
            sample()
            time.sleep(0.2)
        t0 = time.monotonic()
        out, code = box.sh("echo served")
        latencies.append(time.monotonic() - t0)
        assert out == ["served"] and code == 0
        slow_threads = d.threads()
        assert slow_threads < threads0 + 200 + 50
    finally:
        for s in slow:
            s.close()
    assert max(latencies) < 2.0, latencies
    assert wait_for(lambda: d.threads() < threads0 + 20, timeout=10), (threads0, d.threads())
    rss1 = d.rss_kib()
    print("bounded: endless bodies cut after %r MiB; RSS %d -> peak %d -> %d MiB; threads %d ->"
          " %d (slow clients) -> %d; /health max %.3f s" % (cut, rss0 >> 10, peak[0] >> 10,
                                                             rss1 >> 10, threads0, slow_threads,
                                                             d.threads(), max(latencies)))
    # generous: ASan's shadow memory, quarantine and 200 thread stacks
    assert peak[0] < rss0 + (384 << 10), (rss0, peak[0])
    assert rss1 < rss0 + (192 << 10), (rss0, rss1)
    assert box.req("GET", "/ping").status == 200
    d.assert_healthy()


# ---- 7. other clients' sandboxes ----

def test_sbxd_one_client_cannot_use_another_clients_sandbox(sbxd_factory):
    """sbxd has no per-client keys: every holder of the API key is the same principal (and
    without a key, every local user on loopback). What keeps one client's sandbox from another's
    is that its id (64 random bits) and its access token (256 random bits) cannot be guessed and
    that a token opens only its own sandbox. So: ids are 16 hex digits, all different, every
    digit position varies, not sequential; tokens are 64 hex digits, all different; a token of
    sandbox A opens no route of sandbox B and no lifecycle route; a made-up id, a deleted
    sandbox's id, another sbxd's sandbox's id and a contract scope's (predictable) id are 404 on
    every sandbox route, and ids of another shape are 4xx. (An unknown id is 404 even without
    credentials: the token can only be checked against a known sandbox; with 64 random bits,
    that answer finds nothing.)"""
    d = sbxd_factory(key=KEY)
    boxes = [d.create() for _ in range(8)]
    ids = [b.id for b in boxes]
    tokens = [b.token for b in boxes]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids), ids
    assert all(re.fullmatch(r"[0-9a-f]{64}", t) for t in tokens), tokens
    assert len(set(ids)) == len(ids) and len(set(tokens)) == len(tokens)
    for pos in range(16):
        assert len({i[pos] for i in ids}) > 1, ("id digit %d never varies" % pos, ids)
    for pos in range(64):
        assert len({t[pos] for t in tokens}) > 1, ("token digit %d never varies" % pos)
    nums = sorted(int(i, 16) for i in ids)
    assert min(b - a for a, b in zip(nums, nums[1:])) > 1 << 32, ids
    assert not any(i in t for i in ids for t in tokens)

    a, b = boxes[0], boxes[1]
    b.upload("/tmp/b-secret", b"B-ONLY")
    a_tok = {TOKEN_HEADER: a.token}
    for path in ("/ping", "/files/download?path=/tmp/b-secret", "/files/info?path=/tmp",
                 "/directories/list?path=/tmp", "/metrics", "/command/status/x", "/proxy/8000/"):
        for prefix in ("/direct/%s/44772", "/sandboxes/%s/proxy/44772"):
            r = d.req("GET", prefix % b.id + path, headers=a_tok, key=None)
            assert r.status == 401 and b"B-ONLY" not in r.body, (path, r)
    r = d.req("POST", b.prefix + "/command", {"command": "rm /tmp/b-secret"}, a_tok, key=None)
    assert r.status == 401, r
    assert d.req("GET", "/direct/%s/8000/" % b.id, headers=a_tok, key=None).status == 401
    for path in ("/v1/sandboxes", "/v1/sandboxes/" + b.id,
                 "/v1/sandboxes/%s/endpoints/44772" % b.id):
        assert d.req("GET", path, headers=a_tok, key=None).status == 401, path
    assert b.req("GET", "/files/download?path=/tmp/b-secret").body == b"B-ONLY"

    # ids that name no sandbox of this sbxd
    gone = d.create()
    gone_token = gone.token
    assert d.req("DELETE", "/v1/sandboxes/" + gone.id).status == 204
    elsewhere = sbxd_factory(name="elsewhere").create()
    r = d.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t-1"})
    assert r.status == 200, r
    scope = r.json()["sandbox_id"]
    unknown = [MADE_UP, uuid.uuid4().hex[:16], gone.id, elsewhere.id, scope]
    lifecycle = [("GET", "/v1/sandboxes/%s", None), ("DELETE", "/v1/sandboxes/%s", None),
                 ("PATCH", "/v1/sandboxes/%s/metadata", {"k": "v"}),
                 ("POST", "/v1/sandboxes/%s/pause", None),
                 ("POST", "/v1/sandboxes/%s/resume", None),
                 ("POST", "/v1/sandboxes/%s/renew-expiration",
                  {"expiresAt": "2099-01-01T00:00:00Z"}),
                 ("GET", "/v1/sandboxes/%s/endpoints/44772", None)]
    endpoints = [("GET", "/direct/%s/44772/ping", None), ("GET", "/direct/%s/44772/metrics", None),
                 ("POST", "/direct/%s/44772/command", {"command": "true"}),
                 ("GET", "/direct/%s/44772/files/download?path=/etc/passwd", None),
                 ("GET", "/sandboxes/%s/proxy/44772/ping", None),
                 ("GET", "/v1/sandboxes/%s/proxy/8000/", None), ("GET", "/direct/%s/8000/", None)]
    for sid in unknown:
        for method, path, body in lifecycle:
            r = d.req(method, path % sid, body)
            assert r.status == 404, (sid, method, path, r)
        for method, path, body in endpoints:
            for h, key in (({}, OWN), ({}, None), ({TOKEN_HEADER: gone_token}, None),
                           ({TOKEN_HEADER: elsewhere.token}, None)):
                r = d.req(method, path % sid, body, h, key=key)
                assert r.status == 404, (sid, method, path, h, r)
    # contract operations on unknown ids are 404 too
    for sid in (MADE_UP, gone.id, elsewhere.id):
        r = d.req("POST", "/v1/sandboxes/%s/contract/execute_command" % sid, {"command": "true"})
        assert r.status == 404, (sid, r)
    for bad in ("0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "..", "%2e%2e",
                "x" * 300, "0123456789abcdef%00", "*", "0123456789abcde%66", "%20" + MADE_UP):
        for path in ("/v1/sandboxes/%s", "/direct/%s/44772/ping"):
            r = d.req("GET", path % bad)
            assert 400 <= r.status < 500, (bad, path, r)
    assert d.ids() == sorted(ids)
    d.assert_healthy()


# ---- 8. a sandbox dying under a stream or an upload ----

def test_sbxd_survives_sandbox_death_mid_stream(sbxd_factory):
    """SIGKILL of a sandbox's PID 1 (its sbx-init) while sbxd streams a command's events, a
    metrics watch, or receives a large upload into it: the event stream ends (an error event, or
    a clean end) within seconds, the watch ends, the upload gets a 4xx/5xx (never 200) instead of
    hanging; afterwards sbxd keeps serving: /health, the dead sandbox's routes answer at once
    (404/503, or Failed), another sandbox works and a new one can be made."""
    d = sbxd_factory()
    streamed, watched, uploaded, bystander = d.create(), d.create(), d.create(), d.create()
    pids = {b.id: d.init_pid(b.id) for b in (streamed, watched, uploaded)}

    # an event stream
    c = d.conn(timeout=30)
    c.request("POST", streamed.prefix + "/command",
              json.dumps({"command": "echo begin; sleep 60; echo never"}),
              {TOKEN_HEADER: streamed.token, "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    events, line = [], b""
    while b"begin" not in line:
        line = r.readline()
        assert line, events
        if line.strip():
            events.append(json.loads(line))
    os.kill(pids[streamed.id], signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for line in iter(r.readline, b""):
            if line.strip():
                events.append(json.loads(line))
    except (http.client.IncompleteRead, ConnectionError):
        pass  # an abrupt end is an end too, but sbxd ends it cleanly: checked below
    stream_secs = time.monotonic() - t0
    c.close()
    assert stream_secs < 15, stream_secs
    types = [e["type"] for e in events]
    assert types[0] == "init" and "never" not in str(events), events
    assert types[-1] == "error", events
    assert "execution_complete" not in types

    # a metrics watch (one line a second) ends at the next tick: the sandbox's cgroup outlives
    # PID 1 until the sandbox is deleted, but a dead init is no longer reported as figures
    c = d.conn(timeout=5)
    c.request("GET", watched.prefix + "/metrics/watch", headers={TOKEN_HEADER: watched.token})
    r = c.getresponse()
    assert r.status == 200
    assert json.loads(r.readline())["cpu_count"] > 0
    os.kill(pids[watched.id], signal.SIGKILL)
    assert sbxsec.wait_gone(pids[watched.id])
    t0 = time.monotonic()
    late = 0
    try:
        while r.readline():
            late += 1
            assert time.monotonic() - t0 < 5, "the watch of a dead sandbox goes on"
    except (http.client.IncompleteRead, ConnectionResetError):
        pass
    watch_secs = time.monotonic() - t0
    c.close()
    assert late <= 1 and watch_secs < 3, (late, watch_secs)  # at most the line already on its way
    r = watched.req("GET", "/metrics", timeout=10)
    assert r.status >= 400, r.body

    # an upload (256 MiB, chunked): sbx-init dies after 16 MiB
    c = d.conn(timeout=30)
    c.putrequest("POST", uploaded.prefix + "/files/upload")
    c.putheader(TOKEN_HEADER, uploaded.token)
    c.putheader("Content-Type", "multipart/form-data; boundary=B0")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()

    def chunk(data):
        c.send(b"%x\r\n%s\r\n" % (len(data), data))

    block = os.urandom(1 << 20)
    t0 = time.monotonic()
    try:
        chunk(b'--B0\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n'
              b'{"path":"/tmp/big"}\r\n--B0\r\nContent-Disposition: form-data; name="file"; '
              b'filename="big"\r\n\r\n')
        for i in range(256):
            if i == 16:
                os.kill(pids[uploaded.id], signal.SIGKILL)
            chunk(block)
        chunk(b"\r\n--B0--\r\n")
        c.send(b"0\r\n\r\n")
    except OSError:
        pass
    r = c.getresponse()
    body = r.read()
    upload_secs, upload_status = time.monotonic() - t0, r.status
    c.close()
    assert 400 <= upload_status < 600, (upload_status, body)
    assert upload_secs < 20, upload_secs

    # sbxd serves on
    d.assert_healthy()
    for b in (streamed, watched, uploaded):
        assert sbxsec.wait_gone(pids[b.id]), b.id
        t0 = time.monotonic()
        assert b.req("GET", "/ping", timeout=10).status in (404, 503)
        r = d.req("GET", "/v1/sandboxes/" + b.id)
        assert r.status == 404 or r.json()["status"]["state"] == "Failed", r
        assert d.req("DELETE", "/v1/sandboxes/" + b.id).status in (204, 404)
        assert time.monotonic() - t0 < 10
    assert bystander.sh("echo alive") == (["alive"], 0)
    fresh = d.create()
    assert fresh.sh("echo fresh") == (["fresh"], 0)
    print("death: stream ended in %.2f s, watch %.2f s after the kill, upload answered %d in %.2f s"
          % (stream_secs, watch_secs, upload_status, upload_secs))
