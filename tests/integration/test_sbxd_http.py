"""sbxd over raw HTTP (stdlib http.client only): authentication, every error status with its
{code, message}, malformed and oversized input, paths, the event-stream framing, a hundred
concurrent streams, a client vanishing mid-stream, expiry across a kill -9 and restart, volumes,
large and aborted uploads, the port proxy and the contract JSON API.

Each test starts its own sbxd on 127.0.0.1 with an ephemeral port and a temporary --home."""
import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import alive

SOURCE = os.environ.get("SBX_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SBX_BUILD") or os.path.join(SOURCE, "build")
SBXD = os.path.join(BUILD, "sbxd")
SBX = os.path.join(BUILD, "sbx")
KEY = "test-key"

pytestmark = pytest.mark.skipif(not os.path.exists(SBXD), reason="sbxd was not built")


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def error(self):
        """The {code, message} body of an error (never empty)."""
        assert self.body, "an error must have a body"
        j = self.json()
        assert isinstance(j.get("code"), str) and j["code"], j
        assert isinstance(j.get("message"), str) and j["message"], j
        return j["code"], j["message"]


class Server:
    def __init__(self, home, args, env, net=None):
        """net: a fakenet.FakeNet to run sbxd in (its "host" namespace, reached by a forward)."""
        self.home = str(home)
        self.args = args
        self.env = env
        self.logs = []
        self.killed = False
        self.ready = threading.Event()
        argv = [SBXD, "--listen", "127.0.0.1:0", "--home", self.home] + args
        self.proc = subprocess.Popen(net.wrap(argv) if net else argv,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(30):
            self.proc.kill()
            raise AssertionError("sbxd did not start: %s" % self.logs)
        self.host = "127.0.0.1"
        if net:
            self.port = net.forward(self.port)

    def _read(self):
        for line in self.proc.stderr:
            line = line.decode(errors="replace").rstrip("\n")
            try:
                rec = json.loads(line)
            except ValueError:
                rec = {"raw": line}
            self.logs.append(rec)
            if rec.get("msg") == "listening":
                self.address = rec["address"]
                self.port = int(rec["address"].rsplit(":", 1)[1])
                self.ready.set()

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, key=KEY, timeout=60):
        h = dict(headers or {})
        if key is not None and "OPEN-SANDBOX-API-KEY" not in h:
            h["OPEN-SANDBOX-API-KEY"] = key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            c.close()

    def create(self, **kw):
        body = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
                "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "timeout": 600}
        body.update(kw)
        r = self.req("POST", "/v1/sandboxes", body)
        assert r.status == 202, r.body
        return Sandbox(self, r.json()["id"])

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.reader.join(10)
        self.killed = True

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(60)
        self.reader.join(10)
        return self.proc.returncode


class Sandbox:
    def __init__(self, server, sid):
        self.server = server
        self.id = sid
        ep = server.req("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)
        assert ep.status == 200, ep.body
        self.token = ep.json()["headers"]["X-EXECD-ACCESS-TOKEN"]
        self.prefix = "/direct/%s/44772" % sid

    def req(self, method, path, body=None, headers=None, token=True, **kw):
        h = dict(headers or {})
        if token:
            h["X-EXECD-ACCESS-TOKEN"] = self.token
        return self.server.req(method, self.prefix + path, body, h, key=None, **kw)

    def events(self, command, path="/command", timeout=60, **fields):
        body = dict(fields)
        body["command"] = command
        r = self.req("POST", path, body, timeout=timeout)
        assert r.status == 200, r.body
        assert r.headers["content-type"] == "text/event-stream"
        return parse_events(r.body)

    def run(self, command, **fields):
        """stdout lines and the terminal event of a command."""
        evs = self.events(command, **fields)
        out = [e["text"] for e in evs if e["type"] == "stdout"]
        return out, evs[-1]

    def write(self, path, data, mode=None):
        meta = {"path": path}
        if mode:
            meta["mode"] = mode
        body, ctype = multipart([("metadata", "metadata", json.dumps(meta).encode()), ("file", "f", data)])
        r = self.req("POST", "/files/upload", body, {"Content-Type": ctype})
        assert r.status == 200, r.body


def parse_events(raw):
    """execd's framing: each event is one line of JSON followed by a blank line."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-200:]
    chunks = text[:-2].split("\n\n")
    evs = [json.loads(c) for c in chunks]
    for e in evs:
        assert isinstance(e["type"], str)
        assert isinstance(e["timestamp"], int)
    return evs


def multipart(parts, boundary="sbxdtestboundary"):
    out = b""
    for name, filename, data in parts:
        out += b"--" + boundary.encode() + b"\r\n"
        out += ('Content-Disposition: form-data; name="%s"; filename="%s"\r\n' % (name, filename)).encode()
        out += b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
    out += b"--" + boundary.encode() + b"--\r\n"
    return out, "multipart/form-data; boundary=" + boundary


def declared(server, path, length, headers):
    """A POST that declares a body of length bytes and sends none: the answer comes first."""
    c = server.conn()
    c.putrequest("POST", path)
    for k, v in headers.items():
        c.putheader(k, v)
    c.putheader("Content-Length", str(length))
    c.endheaders()
    r = c.getresponse()
    out = Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    c.close()
    return out


@pytest.fixture
def sbxd(tmp_path):
    """start(**opts) -> Server; every server is stopped (and must exit 0) at the end."""
    started = []

    def start(api_key=KEY, config=None, home=None, extra=None, net=None):
        env = dict(os.environ)
        env.pop("OPEN_SANDBOX_API_KEY", None)
        args = []
        if api_key:
            args += ["--api-key", api_key]
        if config is not None:
            cfg = tmp_path / ("config-%d.yaml" % len(started))
            cfg.write_text(config)
            args += ["--config", str(cfg)]
        args += extra or []
        s = Server(home or (tmp_path / "home"), args, env, net)
        started.append(s)
        return s

    yield start
    try:
        for s in started:
            if s.killed:
                continue
            code = s.stop()
            assert code == 0, "sbxd exited with %s: %s" % (code, [l for l in s.logs if "raw" in l][-30:])
    finally:  # a failed test or a crashed sbxd must not leave its sandboxes running
        for s in started:
            subprocess.run([SBX, "--home", s.home, "down"], capture_output=True, timeout=120)


def sbx_ps(home):
    p = subprocess.run([SBX, "--home", str(home), "ps", "--json"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["sandboxes"]


# ---- authentication, request ids, health ----

def test_auth_request_id_and_health(sbxd):
    s = sbxd()
    r = s.req("GET", "/health", key=None)
    assert r.status == 200 and r.json() == {"status": "healthy"}
    assert len(r.headers["x-request-id"]) == 32
    r = s.req("GET", "/v1/sandboxes", key=None, headers={"X-Request-ID": "rid-123"})
    assert r.status == 401
    assert r.error() == ("MISSING_API_KEY", "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.")
    assert r.headers["x-request-id"] == "rid-123"
    r = s.req("GET", "/v1/sandboxes", key="wrong")
    assert r.status == 401
    assert r.error() == ("INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")
    # auth runs before routing: an unknown path without a key is 401, with one 404
    assert s.req("GET", "/v1/nope", key=None).status == 401
    r = s.req("GET", "/v1/nope")
    assert r.status == 404 and r.error()[0] == "GENERAL::NOT_FOUND"
    r = s.req("PUT", "/v1/sandboxes")
    assert r.status == 405 and r.error()[0] == "GENERAL::METHOD_NOT_ALLOWED"
    # the lifecycle API is mounted at the root too
    r = s.req("GET", "/sandboxes")
    assert r.status == 200 and r.json()["items"] == []
    r = s.req("POST", "/v1/metrics/events", {"eventType": "sandbox.create", "success": True})
    assert r.status == 204 and r.body == b""
    # CORS preflight
    r = s.req("OPTIONS", "/v1/sandboxes", key=None,
              headers={"Origin": "http://x", "Access-Control-Request-Method": "POST"})
    assert r.status == 200 and r.headers["access-control-allow-origin"] == "*"


def test_no_key_only_on_loopback(sbxd, tmp_path):
    env = dict(os.environ)
    env.pop("OPEN_SANDBOX_API_KEY", None)
    p = subprocess.run([SBXD, "--listen", "0.0.0.0:0", "--home", str(tmp_path / "h")], env=env,
                       capture_output=True, timeout=30)
    assert p.returncode == 2
    assert b"refusing to listen on 0.0.0.0:0 without an API key" in p.stderr
    # without a key on loopback there is no lifecycle auth
    s = sbxd(api_key=None)
    assert s.req("GET", "/v1/sandboxes", key=None).status == 200
    # the key may also come from the environment
    env["OPEN_SANDBOX_API_KEY"] = "from-env"
    srv = Server(tmp_path / "h2", [], env)
    try:
        assert srv.req("GET", "/v1/sandboxes", key=None).status == 401
        assert srv.req("GET", "/v1/sandboxes", key="from-env").status == 200
    finally:
        assert srv.stop() == 0
    # a DeerFlow config.yaml (sandbox.use names the OpenSandbox provider) would make sbxd a
    # client of itself: refused
    cfg = tmp_path / "deerflow.yaml"
    cfg.write_text("sandbox:\n  use: deerflow.community.opensandbox:OpenSandboxProvider\n")
    p = subprocess.run([SBXD, "--listen", "127.0.0.1:0", "--home", str(tmp_path / "h3"), "--config", str(cfg)],
                       env=env, capture_output=True, timeout=30)
    assert p.returncode == 2 and b"sandbox.use is 'opensandbox'" in p.stderr
    p = subprocess.run([SBXD, "--help"], capture_output=True, timeout=10)
    assert p.returncode == 0 and b"Usage: sbxd" in p.stdout
    p = subprocess.run([SBXD, "--bogus"], capture_output=True, timeout=10)
    assert p.returncode == 2


# ---- create: validation, and bad input changes nothing ----

BASE = {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
        "resourceLimits": {"cpu": "1", "memory": "1Gi"}}


def with_(**kw):
    b = json.loads(json.dumps(BASE))
    for k, v in kw.items():
        if v is None:
            b.pop(k, None)
        else:
            b[k] = v
    return b


CREATE_ERRORS = [
    ("{not json", 422, "SANDBOX::VALIDATION_ERROR", "malformed JSON body"),
    ("", 422, "SANDBOX::VALIDATION_ERROR", "request body must be JSON, got an empty body"),
    ([1, 2], 422, "SANDBOX::VALIDATION_ERROR", "body: Input should be a valid dictionary"),
    (with_(image=None), 422, "SANDBOX::VALIDATION_ERROR", "exactly one of image or snapshotId"),
    (with_(snapshotId="s1"), 422, "SANDBOX::VALIDATION_ERROR", "exactly one of image or snapshotId"),
    (with_(image=None, snapshotId="s1"), 404, "SNAPSHOT::NOT_FOUND", "Snapshot s1 not found"),
    (with_(entrypoint=None), 422, "SANDBOX::VALIDATION_ERROR", "body.entrypoint: Field required"),
    (with_(entrypoint=[]), 422, "SANDBOX::VALIDATION_ERROR", "at least 1 item"),
    (with_(entrypoint=["ok", 3]), 422, "SANDBOX::VALIDATION_ERROR", "items should be strings"),
    (with_(timeout=59), 422, "SANDBOX::VALIDATION_ERROR", "greater than or equal to 60"),
    (with_(timeout="90"), 422, "SANDBOX::VALIDATION_ERROR", "valid integer"),
    (with_(timeout=90.5), 422, "SANDBOX::VALIDATION_ERROR", "valid integer"),
    (with_(resourceLimits=None), 422, "SANDBOX::VALIDATION_ERROR", "body.resourceLimits: Field required"),
    (with_(resourceLimits={"cpu": 1}), 422, "SANDBOX::VALIDATION_ERROR", "map of strings"),
    (with_(metadata={"a": 1}), 422, "SANDBOX::VALIDATION_ERROR", "body.metadata"),
    (with_(timeout=86401), 400, "SANDBOX::INVALID_PARAMETER", "Sandbox timeout 86401s exceeds configured maximum of 86400s."),
    (with_(metadata={"opensandbox.io/x": "1"}), 400, "SANDBOX::INVALID_METADATA_LABEL", "uses the reserved prefix 'opensandbox.io/'"),
    (with_(metadata={"bad key": "1"}), 400, "SANDBOX::INVALID_METADATA_LABEL", "Metadata key 'bad key' is invalid"),
    (with_(metadata={"k": "-bad"}), 400, "SANDBOX::INVALID_METADATA_LABEL", "Metadata value '-bad' is invalid"),
    (with_(metadata={"k": "x" * 64}), 400, "SANDBOX::INVALID_METADATA_LABEL", "is invalid"),
    (with_(image={"uri": "debian:12"}), 400, "SANDBOX::IMAGE_NOT_FOUND", "Image 'debian:12' is not in sbxd's local image store"),
    (with_(resourceLimits={"cpu": "lots"}), 400, "SANDBOX::INVALID_PARAMETER", "Invalid resourceLimits.cpu 'lots'"),
    (with_(resourceLimits={"memory": "2Qi"}), 400, "SANDBOX::INVALID_PARAMETER", "Invalid resourceLimits.memory '2Qi'"),
    (with_(resourceLimits={"gpu": "1"}), 400, "SANDBOX::INVALID_PARAMETER", "sbxd has no GPUs"),
    (with_(env={"1BAD": "x"}), 400, "SANDBOX::INVALID_PARAMETER", "env key '1BAD' is not a valid environment variable name"),
    (with_(platform={"os": "plan9", "arch": "amd64"}), 400, "SANDBOX::INVALID_PARAMETER", "Unsupported platform.os 'plan9'"),
    (with_(networkPolicy={"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}),
     400, "SANDBOX::API_NOT_SUPPORTED", "networkPolicy is not supported"),
    (with_(credentialProxy={"enabled": True}), 400, "SANDBOX::API_NOT_SUPPORTED", "credentialProxy"),
    (with_(extensions={"poolRef": "p"}), 400, "SANDBOX::UNSUPPORTED_POOL_REF", "poolRef"),
    (with_(volumes=[{"name": "v", "mountPath": "/data", "host": {"path": "/etc"}}]),
     400, "VOLUME::HOST_PATH_NOT_ALLOWED", "Host path '/etc' is not under any allowed prefix"),
    (with_(volumes=[{"name": "v", "mountPath": "/data"}]), 400, "VOLUME::INVALID_BACKEND", "but none was provided"),
    (with_(volumes=[{"name": "V!", "mountPath": "/data", "pvc": {"claimName": "c"}}]), 400, "VOLUME::INVALID_NAME", "not a valid DNS label"),
    (with_(volumes=[{"name": "v", "mountPath": "rel", "pvc": {"claimName": "c"}}]), 400, "VOLUME::INVALID_MOUNT_PATH", "must be an absolute path"),
    (with_(volumes=[{"name": "v", "mountPath": "/proc/x", "pvc": {"claimName": "c"}}]), 400, "VOLUME::INVALID_MOUNT_PATH", "must not be /proc"),
    (with_(volumes=[{"name": "v", "mountPath": "/d", "pvc": {"claimName": "c"}, "subPath": "../x"}]), 400, "VOLUME::INVALID_SUB_PATH", "path traversal"),
    (with_(volumes=[{"name": "v", "mountPath": "/d", "pvc": {"claimName": "c", "createIfNotExists": False}}]), 400, "VOLUME::PVC_NOT_FOUND", "does not exist"),
    (with_(volumes=[{"name": "v", "mountPath": "/d", "pvc": {"claimName": "c"}}, {"name": "v", "mountPath": "/e", "pvc": {"claimName": "c"}}]),
     400, "VOLUME::DUPLICATE_NAME", "Duplicate volume name 'v'"),
]


def test_create_validation_changes_nothing(sbxd):
    s = sbxd()
    for body, status, code, text in CREATE_ERRORS:
        r = s.req("POST", "/v1/sandboxes", body, headers={"Content-Type": "application/json"})
        assert r.status == status, (body, r.body)
        got_code, msg = r.error()
        assert got_code == code, (body, r.body)
        assert text in msg, (body, msg)
    assert s.req("GET", "/v1/sandboxes").json()["items"] == []
    assert sbx_ps(s.home) == []
    assert not os.path.exists(os.path.join(s.home, "volumes", "c"))
    # an oversized body is refused before it is read
    r = declared(s, "/v1/sandboxes", 2 << 20, {"OPEN-SANDBOX-API-KEY": KEY})
    assert r.status == 413
    assert r.error() == ("GENERAL::REQUEST_TOO_LARGE", "request body of 2097152 bytes exceeds the limit of 1048576 bytes")


# ---- the lifecycle routes and their errors ----

def test_lifecycle_routes(sbxd):
    s = sbxd()
    sb = s.create(metadata={"team": "a", "tag": "x"})
    manual = s.create(timeout=None)
    r = s.req("GET", "/v1/sandboxes/%s" % sb.id)
    info = r.json()
    assert r.status == 200 and info["status"]["state"] == "Running"
    assert info["image"] == {"uri": "host"} and info["metadata"] == {"team": "a", "tag": "x"}
    assert "expiresAt" in info and "createdAt" in info
    assert "expiresAt" not in s.req("GET", "/v1/sandboxes/%s" % manual.id).json()
    missing = "0123456789abcdef"
    r = s.req("GET", "/v1/sandboxes/" + missing)
    assert r.status == 404 and r.error() == ("DOCKER::SANDBOX_NOT_FOUND", "Sandbox %s not found." % missing)

    # list: filters and pagination
    r = s.req("GET", "/v1/sandboxes?metadata=" + urllib.parse.quote("team=a&tag=x") + "&state=running")
    assert [i["id"] for i in r.json()["items"]] == [sb.id]
    r = s.req("GET", "/v1/sandboxes?pageSize=1&page=2")
    assert r.json()["pagination"] == {"page": 2, "pageSize": 1, "totalItems": 2, "totalPages": 2, "hasNextPage": False}
    for q, status in (("page=0", 422), ("pageSize=201", 422), ("page=x", 422)):
        assert s.req("GET", "/v1/sandboxes?" + q).status == status
    r = s.req("GET", "/v1/sandboxes?metadata=" + urllib.parse.quote("a=1&broken"))
    assert r.status == 400 and r.error() == ("INVALID_METADATA_FORMAT", "Invalid metadata format: bad query field: 'broken'")
    # an empty key (as parse_qsl gives it) matches nothing; it once read past its buffer
    r = s.req("GET", "/v1/sandboxes?metadata=" + urllib.parse.quote("=ml&team=a"))
    assert r.status == 200 and r.json()["items"] == [], r.body

    # metadata patch
    r = s.req("PATCH", "/v1/sandboxes/%s/metadata" % sb.id, {"tag": None, "new": "v"})
    assert r.status == 200 and r.json()["metadata"] == {"team": "a", "new": "v"}
    r = s.req("PATCH", "/v1/sandboxes/%s/metadata" % sb.id, {"opensandbox.io/id": "x"})
    assert r.status == 400 and r.error() == ("INVALID_METADATA_LABEL", "Metadata key 'opensandbox.io/id' is reserved (opensandbox.io/ prefix).")
    assert s.req("PATCH", "/v1/sandboxes/%s/metadata" % sb.id, {"k": 1}).status == 422
    assert s.req("PATCH", "/v1/sandboxes/%s/metadata" % sb.id, {"k": "-x"}).status == 400
    assert s.req("PATCH", "/v1/sandboxes/%s/metadata" % missing, {"k": "v"}).status == 404

    # renew
    future = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3600))
    r = s.req("POST", "/v1/sandboxes/%s/renew-expiration" % sb.id, {"expiresAt": future})
    assert r.status == 200 and r.json()["expiresAt"].startswith(future[:19])
    r = s.req("POST", "/v1/sandboxes/%s/renew-expiration" % sb.id, {"expiresAt": "2001-01-01T00:00:00Z"})
    assert r.status == 400 and r.error() == ("DOCKER::INVALID_EXPIRATION", "New expiration time must be in the future.")
    r = s.req("POST", "/v1/sandboxes/%s/renew-expiration" % manual.id, {"expiresAt": future})
    assert r.status == 409 and r.error() == ("DOCKER::INVALID_EXPIRATION", "Sandbox %s does not have automatic expiration enabled." % manual.id)
    assert s.req("POST", "/v1/sandboxes/%s/renew-expiration" % sb.id, {"expiresAt": "tomorrow"}).status == 422
    assert s.req("POST", "/v1/sandboxes/%s/renew-expiration" % missing, {"expiresAt": future}).status == 404

    # pause / resume
    r = s.req("POST", "/v1/sandboxes/%s/resume" % sb.id)
    assert r.status == 409 and r.error() == ("DOCKER::SANDBOX_NOT_PAUSED", "Sandbox is not in a paused state.")
    r = s.req("POST", "/v1/sandboxes/%s/pause" % sb.id)
    assert r.status == 202 and r.body == b"" and r.headers["content-length"] == "0"
    r = s.req("POST", "/v1/sandboxes/%s/pause" % sb.id)
    assert r.status == 409 and r.error() == ("DOCKER::SANDBOX_NOT_RUNNING", "Sandbox is not in a running state.")
    assert s.req("GET", "/v1/sandboxes?state=Paused").json()["pagination"]["totalItems"] == 1
    r = sb.req("GET", "/ping")
    assert r.status == 409 and r.error()[0] == "SANDBOX_PAUSED"
    assert s.req("POST", "/v1/sandboxes/%s/resume" % sb.id).status == 202
    assert sb.req("GET", "/ping").status == 200
    # a paused sandbox can be deleted (it is thawed first)
    frozen = s.create()
    frozen_pid = next(x["pid"] for x in sbx_ps(s.home) if x["id"] == frozen.id)
    assert s.req("POST", "/v1/sandboxes/%s/pause" % frozen.id).status == 202
    assert s.req("DELETE", "/v1/sandboxes/%s" % frozen.id).status == 204
    assert not alive(frozen_pid)

    # endpoints
    r = s.req("GET", "/v1/sandboxes/%s/endpoints/8000" % sb.id, headers={"Host": "sbx.example:9"})
    assert r.json() == {"endpoint": "sbx.example:9/direct/%s/8000" % sb.id, "headers": {"X-EXECD-ACCESS-TOKEN": sb.token}}
    r = s.req("GET", "/v1/sandboxes/%s/endpoints/18080?use_server_proxy=true" % sb.id)
    assert r.json()["endpoint"] == "%s/sandboxes/%s/proxy/18080" % (s.address, sb.id)
    r = s.req("GET", "/v1/sandboxes/%s/endpoints/0" % sb.id)
    assert r.status == 400 and r.error() == ("DOCKER::INVALID_PORT", "Port must be between 1 and 65535.")
    assert s.req("GET", "/v1/sandboxes/%s/endpoints/http" % sb.id).status == 422
    assert s.req("GET", "/v1/sandboxes/%s/endpoints/80?use_server_proxy=maybe" % sb.id).status == 422
    r = s.req("GET", "/v1/sandboxes/%s/endpoints/80?use_server_proxy=true&expires=99" % sb.id)
    assert r.status == 400 and r.error()[0] == "SANDBOX::INVALID_PARAMETER"
    assert s.req("GET", "/v1/sandboxes/%s/endpoints/80?expires=99" % sb.id).status == 400
    assert s.req("GET", "/v1/sandboxes/%s/endpoints/80" % missing).status == 404
    # snapshots (test_snapshots.py): a `host` sandbox has no root to snapshot
    assert s.req("POST", "/v1/sandboxes/%s/snapshots" % sb.id, {}).status == 501
    assert s.req("GET", "/v1/snapshots").status == 200

    # delete
    r = s.req("DELETE", "/v1/sandboxes/%s" % sb.id)
    assert r.status == 204 and r.body == b""
    assert s.req("DELETE", "/v1/sandboxes/%s" % sb.id).status == 404
    assert s.req("GET", "/v1/sandboxes/%s" % sb.id).status == 404
    assert sb.req("GET", "/ping").status == 404
    assert [x["id"] for x in sbx_ps(s.home)] == [manual.id]


# ---- execd: credentials, errors, paths ----

def test_execd_errors(sbxd):
    s = sbxd()
    sb = s.create()
    r = sb.req("GET", "/ping", token=False)
    assert r.status == 401
    assert r.json()["message"] == "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"
    assert sb.req("GET", "/ping", headers={"X-EXECD-ACCESS-TOKEN": "x" * 64}, token=False).status == 401
    # the API key also opens a sandbox's endpoints
    assert s.req("GET", sb.prefix + "/ping").status == 200
    # the proxy form works alike, under / and /v1
    for p in ("/sandboxes/%s/proxy/44772/ping" % sb.id, "/v1/sandboxes/%s/proxy/44772/ping" % sb.id):
        assert s.req("GET", p, key=None, headers={"X-EXECD-ACCESS-TOKEN": sb.token}).status == 200
        assert s.req("GET", p, key=None).status == 401
    assert s.req("GET", "/direct/0123456789abcdef/44772/ping").status == 404
    assert s.req("GET", "/direct/%s/notaport/ping" % sb.id).status == 400
    assert s.req("GET", "/direct/%s/70000/ping" % sb.id).status == 400
    # a path with ".." is not an endpoint route: it needs the API key and matches nothing
    assert s.req("GET", "/direct/%s/44772/../ping" % sb.id, key=None, headers={"X-EXECD-ACCESS-TOKEN": sb.token}).status == 401

    r = sb.req("POST", "/command", "{bad")
    assert r.status == 400 and r.error()[0] == "INVALID_REQUEST_BODY"
    assert r.error()[1].startswith("error parsing request, MAYBE invalid body format.")
    r = sb.req("POST", "/command", {"command": ""})
    assert r.status == 400 and r.error() == ("INVALID_REQUEST_BODY", "invalid request, validation error command is required")
    r = sb.req("POST", "/command", {"command": "true", "gid": 1})
    assert r.error() == ("INVALID_REQUEST_BODY", "invalid request, validation error uid is required when gid is provided")
    assert sb.req("POST", "/command", {"command": "true", "timeout": -1}).status == 400
    assert sb.req("POST", "/command", {"command": "true", "envs": {"A": 1}}).status == 400
    r = sb.req("DELETE", "/command")
    assert r.status == 400 and r.error() == ("MISSING_QUERY", "missing query parameter 'id'")
    r = sb.req("GET", "/command/nope/logs")
    assert r.status == 400 and r.error()[0] == "INVALID_REQUEST_BODY"
    assert sb.req("GET", "/command/status/nope").status == 404
    assert sb.req("GET", "/files/download").error() == ("MISSING_QUERY", "missing query parameter 'path'")
    assert sb.req("GET", "/files/search").status == 400
    r = sb.req("GET", "/files/download?path=/nope")
    assert r.status == 404 and r.error()[0] == "FILE_NOT_FOUND"
    r = sb.req("GET", "/files/download?path=/tmp")
    assert r.status == 400 and r.error() == ("INVALID_FILE", "/tmp is a directory")
    r = sb.req("GET", "/files/info?path=/tmp&path=/nope")
    assert r.status == 404 and r.error()[0] == "FILE_NOT_FOUND"
    assert sb.req("GET", "/files/info").json() == {}
    assert sb.req("POST", "/files/mv", {"src": "x"}).status == 400
    assert sb.req("POST", "/files/replace", {"/tmp/x": {"old": ""}}).status == 400
    assert sb.req("POST", "/files/permissions", {"/tmp": {"mode": 799}}).status == 400
    assert sb.req("GET", "/directories/list?path=/tmp&depth=-1").status == 400
    assert sb.req("GET", "/directories/list?path=/nope").status == 404
    assert sb.req("GET", "/directories/list?path=/etc/passwd").status == 400
    assert sb.req("GET", "/directories/list?path=/tmp&depth=0").json() == []
    assert sb.req("DELETE", "/files?path=/tmp").status == 500
    assert sb.req("GET", "/nothing/here").status == 404
    r = sb.req("POST", "/code", {"code": "1"})
    assert r.status == 501 and r.error()[0] == "NOT_SUPPORTED"
    # oversized bodies: declared (refused before reading) and streamed
    r = declared(s, sb.prefix + "/command", 17 << 20, {"X-EXECD-ACCESS-TOKEN": sb.token})
    assert r.status == 413 and r.error()[0] == "GENERAL::REQUEST_TOO_LARGE"
    c = s.conn()
    c.putrequest("POST", sb.prefix + "/command")
    c.putheader("X-EXECD-ACCESS-TOKEN", sb.token)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    block = b" " * (1 << 20)
    for _ in range(17):
        c.send(b"%x\r\n%s\r\n" % (len(block), block))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    assert r.status == 413
    r.read()
    c.close()
    # oversized headers: MHD refuses them
    r = s.req("GET", "/health", headers={"X-Big": "y" * (80 << 10)})
    assert r.status == 431
    # nothing of that changed the sandbox or stopped sbxd
    assert sb.req("GET", "/ping").status == 200


def test_route_table_answers(sbxd):
    """Who answers what the route table (src/daemon/router.c) does not serve: the lifecycle and
    contract APIs say 405 for a known path's other methods and 404 for an unknown path, execd
    404 for both (but /ping: 405); parameters are one segment, a command's status id the rest,
    a log's id may be empty; /code is a prefix (501), /pty is pty.c's."""
    s = sbxd()
    assert s.req("GET", "/nope", key=None).status == 401  # the key is checked first
    r = s.req("GET", "/nope")
    assert r.status == 404 and r.error() == ("GENERAL::NOT_FOUND", "Not Found: GET /nope")
    r = s.req("PUT", "/v1/sandboxes")
    assert r.status == 405 and r.error() == ("GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed: PUT /v1/sandboxes")
    assert s.req("HEAD", "/v1/sandboxes").status == 405  # HEAD is not GET in the lifecycle API
    r = s.req("POST", "/health", key=None)
    assert r.status == 405 and r.error() == ("GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed")
    assert s.req("GET", "/v1/health", key=None).status == 401  # /health is not below /v1
    assert s.req("GET", "/v1/health").status == 404
    assert s.req("GET", "//v1//sandboxes/").status == 200  # empty segments do not count
    assert s.req("GET", "/v1/contract/acquire").status == 405
    assert s.req("POST", "/v1/sandboxes/x/contract/bogus", {}).status == 404
    assert s.req("POST", "/v1/sandboxes/x/contract", {}).status == 404
    for m, p, st in (("GET", "/v1/snapshots/abc", 404), ("DELETE", "/v1/sandboxes/x/snapshots", 405),
                     ("GET", "/snapshots", 200), ("POST", "/v1/snapshots", 405)):
        assert s.req(m, p).status == st, (m, p)

    sb = s.create()
    r = sb.req("POST", "/ping")
    assert r.status == 405 and r.error() == ("NOT_SUPPORTED", "method not allowed")
    assert sb.req("HEAD", "/ping").status == 200  # HEAD is GET in execd
    r = sb.req("GET", "/command")
    assert r.status == 404 and r.error() == ("NOT_FOUND", "no execd route for GET /command")
    r = sb.req("GET", "/command/status/a/b")
    assert r.status == 404 and r.error() == ("INVALID_REQUEST_BODY", "command not found: a/b")
    assert sb.req("GET", "/command//logs").error()[1] != "no execd route for GET /command//logs"
    assert sb.req("GET", "/command/a/b/logs").error()[1] == "no execd route for GET /command/a/b/logs"
    assert sb.req("POST", "/session//run", {"command": "true"}).error()[0] == "NOT_FOUND"
    assert sb.req("DELETE", "/session/nope").error()[0] == "CONTEXT_NOT_FOUND"
    assert sb.req("DELETE", "/session/").error()[0] == "NOT_FOUND"
    assert sb.req("GET", "/directories").error()[0] == "NOT_FOUND"
    for p in ("/code", "/codex", "/code/contexts"):
        assert sb.req("GET", p).status == 501, p
    assert sb.req("GET", "/pty").error()[0] == "NOT_FOUND"  # only POST /pty
    r = sb.req("GET", "/pty/1")
    assert r.status == 404 and r.error() == ("CONTEXT_NOT_FOUND", "pty session 1 not found")
    assert sb.req("GET", "/pty/1/ws/x").error()[0] == "NOT_FOUND"
    assert sb.req("GET", "/ping").status == 200


# ---- the event stream ----

def test_event_stream_framing(sbxd):
    s = sbxd()
    sb = s.create()
    sock = socket.create_connection((s.host, s.port), timeout=30)
    body = json.dumps({"command": "printf 'a\\n\\nb\\n\\n\\nc\\n'"}).encode()
    sock.sendall(b"POST %s/command HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                 % (sb.prefix.encode(), sb.token.encode(), len(body), body))
    raw = b""
    while True:
        d = sock.recv(65536)
        if not d:
            break
        raw += d
    sock.close()
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Content-Type: text/event-stream" in head and b"Transfer-Encoding: chunked" in head
    assert b"Cache-Control: no-cache" in head
    payload = b""
    while chunked:
        size, _, rest = chunked.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        payload += rest[:n]
        chunked = rest[n + 2:]
    assert b"data:" not in payload
    evs = parse_events(payload)
    assert [e["type"] for e in evs] == ["init", "ping"] + ["stdout"] * 6 + ["execution_complete"]
    assert len(evs[0]["text"]) == 32
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["a", "\n", "b", "\n", "\n", "c"]
    # a missing command: stderr names it, then an error with evalue 127 and no completion
    evs = sb.events("no-such-cmd-xyz")
    assert any(e["type"] == "stderr" and "no-such-cmd-xyz" in e["text"] for e in evs)
    assert evs[-1]["type"] == "error"
    assert evs[-1]["error"] == {"ename": "CommandExecError", "evalue": "127", "traceback": ["exit status 127"]}
    assert not any(e["type"] == "execution_complete" for e in evs)
    # background: init then execution_complete at once; logs by byte cursor
    evs = sb.events("echo bg-1; sleep 0.2; echo bg-2", background=True)
    assert [e["type"] for e in evs] == ["init", "ping", "execution_complete"]
    cid = evs[0]["text"]
    text, cursor = "", 0
    for _ in range(50):
        r = sb.req("GET", "/command/%s/logs?cursor=%d" % (cid, cursor))
        assert r.status == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
        text += r.body.decode()
        cursor = int(r.headers["execd-commands-tail-cursor"])
        if "bg-2" in text:
            break
        time.sleep(0.1)
    assert text == "bg-1\nbg-2\n" and cursor == len(text)
    st = sb.req("GET", "/command/status/" + cid).json()
    assert st["id"] == cid and "started_at" in st
    # keep-alive pings while a command is silent
    evs = sb.events("sleep 3.5; echo late")
    pings = [e for e in evs if e["type"] == "ping"]
    assert len(pings) >= 2 and all(p["text"] == "pong" for p in pings)


def test_commands_get_the_sandbox_limits_not_sbxd_s(sbxd):
    # sbxd raises its own descriptor limit; its sandboxes' commands still get 1024
    s = sbxd()
    sb = s.create()
    out, last = sb.run("ulimit -Sn; ulimit -c; ulimit -s")
    assert out == ["1024", "0", "8192"] and last["type"] == "execution_complete", (out, last)


def test_hundred_concurrent_streams(sbxd):
    s = sbxd()
    sb = s.create()
    results, errors = {}, []

    def one(i):
        try:
            out, last = sb.run("echo start-%d; sleep 1; echo end-%d" % (i, i), timeout=120)
            results[i] = (out, last["type"])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert errors == []
    assert len(results) == 100
    for i, (out, last) in results.items():
        assert out == ["start-%d" % i, "end-%d" % i] and last == "execution_complete"
    assert time.time() - t0 < 60
    assert sb.req("GET", "/ping").status == 200


def test_client_vanishes_mid_stream(sbxd):
    s = sbxd()
    sb = s.create()
    for _ in range(3):
        sock = socket.create_connection((s.host, s.port), timeout=30)
        body = json.dumps({"command": "echo begin; sleep 2; echo done > /tmp/finished-$$; echo $$ >> /tmp/pids"}).encode()
        sock.sendall(b"POST %s/command HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (sb.prefix.encode(), sb.token.encode(), len(body), body))
        got = b""
        while b"begin" not in got:
            d = sock.recv(4096)
            assert d
            got += d
        # vanish: reset the connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    assert sb.req("GET", "/ping").status == 200
    out, last = sb.run("echo still-serving")
    assert out == ["still-serving"]
    # the abandoned commands were killed with their client (execd let them run on for nobody):
    # well past their 2 s, none finished, and none still runs
    time.sleep(4)
    out, _ = sb.run("cat /tmp/pids 2>/dev/null | wc -l; ls /tmp | grep -c finished-; "
                    "ps -eo comm= | grep -c '^sleep$'")
    assert out == ["0", "0", "0"], out
    # the control: a client that stays gets its command's end
    out, last = sb.run("sleep 2; echo done > /tmp/finished-kept")
    assert last["type"] == "execution_complete"
    out, _ = sb.run("ls /tmp | grep -c finished-")
    assert out == ["1"]


# ---- expiry ----

def future(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + seconds)) + ".%03dZ" % (int(time.time() * 1000) % 1000)


def test_expiry_timer(sbxd):
    s = sbxd()
    sb = s.create()
    state = os.path.join(s.home, "sandboxes", sb.id)
    pid = next(x["pid"] for x in sbx_ps(s.home) if x["id"] == sb.id)
    assert os.path.isdir(state)
    r = s.req("POST", "/v1/sandboxes/%s/renew-expiration" % sb.id, {"expiresAt": future(1.5)})
    assert r.status == 200
    deadline = time.time() + 15
    while time.time() < deadline and s.req("GET", "/v1/sandboxes/" + sb.id).status == 200:
        time.sleep(0.2)
    assert s.req("GET", "/v1/sandboxes/" + sb.id).status == 404
    assert not os.path.exists(state)
    assert not alive(pid)
    assert any(l.get("msg") == "sandbox removed" and l.get("reason") == "ttl_expiry" for l in s.logs)


def test_restart_adopts_and_expires(sbxd, tmp_path):
    home = tmp_path / "home"
    s = sbxd(home=home)
    keep = s.create()
    manual = s.create(timeout=None)
    doomed = s.create()
    keep.write("/tmp/kept.txt", b"survives")
    bg = keep.events("sleep 300", background=True)[0]["text"]
    r = s.req("POST", "/v1/sandboxes/%s/renew-expiration" % doomed.id, {"expiresAt": future(2)})
    assert r.status == 200
    doomed_pid = next(x["pid"] for x in sbx_ps(home) if x["id"] == doomed.id)
    s.kill9()
    time.sleep(2.5)  # the doomed sandbox expires while sbxd is down
    s2 = sbxd(home=home)
    assert any(l.get("msg") == "sandbox removed at startup" and l.get("sandbox_id") == doomed.id and l.get("reason") == "ttl_expiry" for l in s2.logs)
    assert s2.req("GET", "/v1/sandboxes/" + doomed.id).status == 404
    assert not os.path.exists(os.path.join(str(home), "sandboxes", doomed.id))
    assert not alive(doomed_pid)
    ids = sorted(i["id"] for i in s2.req("GET", "/v1/sandboxes").json()["items"])
    assert ids == sorted([keep.id, manual.id])
    assert sorted(x["id"] for x in sbx_ps(home)) == ids
    # the adopted sandboxes keep their tokens, files, processes and expiry
    keep.server = s2
    assert keep.req("GET", "/files/download?path=/tmp/kept.txt").body == b"survives"
    assert keep.req("GET", "/command/status/" + bg).json()["running"] is True
    out, _ = keep.run("echo adopted")
    assert out == ["adopted"]
    assert "expiresAt" in s2.req("GET", "/v1/sandboxes/" + keep.id).json()
    assert "expiresAt" not in s2.req("GET", "/v1/sandboxes/" + manual.id).json()


def test_killed_under_churn_loses_nothing_acknowledged(sbxd, tmp_path):
    """Six clients create, use, pause/resume and delete sandboxes (spares on) while sbxd is
    SIGKILLed and restarted: every sandbox whose create was acknowledged and whose delete was
    not is listed afterwards and still runs commands; every acknowledged delete stays deleted;
    after `sbx down` no process of the run is left."""
    home = tmp_path / "home"
    cfg = "sandbox:\n  spares: 2\n"
    state = {"s": sbxd(home=home, config=cfg)}
    live, deleted, errors = {}, set(), []
    lock, stop, paused_world = threading.Lock(), threading.Event(), threading.Event()

    def client(n):
        import random
        rnd = random.Random(n)
        mine = []
        while not stop.is_set():
            if paused_world.is_set():
                time.sleep(0.02)
                continue
            s = state["s"]
            try:
                a = rnd.random()
                if a < 0.35 or not mine:
                    sb = s.create(timeout=None)
                    with lock:
                        live[sb.id] = sb
                    mine.append(sb.id)
                elif a < 0.7:
                    sb = live[rnd.choice(mine)]
                    sb.server = s
                    out, last = sb.run("echo ok")
                    if out != ["ok"]:
                        errors.append(("exec", sb.id, out, last))
                elif a < 0.8:
                    sid = rnd.choice(mine)
                    r1 = s.req("POST", "/v1/sandboxes/%s/pause" % sid)
                    r2 = s.req("POST", "/v1/sandboxes/%s/resume" % sid)
                    if r1.status != 202 or r2.status != 202:
                        errors.append(("pause/resume", sid, r1.status, r2.status))
                else:
                    sid = mine.pop(rnd.randrange(len(mine)))
                    r = s.req("DELETE", "/v1/sandboxes/" + sid)
                    if r.status != 204:
                        errors.append(("delete", sid, r.status))
                    with lock:
                        live.pop(sid, None)
                        deleted.add(sid)
            except (OSError, http.client.HTTPException, AssertionError):
                if not paused_world.is_set():
                    errors.append(("transport", n))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(4)
    paused_world.set()
    time.sleep(0.5)  # requests in flight finish or fail; none is counted either way
    state["s"].kill9()
    state["s"] = sbxd(home=home, config=cfg)
    paused_world.clear()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join(120)
    s = state["s"]
    listed = {i["id"]: i["status"]["state"]
              for i in s.req("GET", "/v1/sandboxes?pageSize=200").json()["items"]}
    assert errors == [] or all(e[0] == "transport" for e in errors), errors[:5]
    assert len(live) > 3 and len(deleted) > 0, (len(live), len(deleted))
    with lock:
        survivors, gone = dict(live), set(deleted)
    # a client cut off in a pause/resume by the kill may leave its sandbox paused
    for sid in survivors:
        assert listed.get(sid) in ("Running", "Paused"), (sid, listed.get(sid))
        if listed[sid] == "Paused":
            assert s.req("POST", "/v1/sandboxes/%s/resume" % sid).status == 202
        sb = survivors[sid]
        sb.server = s
        assert sb.run("echo still")[0] == ["still"], sid
    assert not gone & set(listed), gone & set(listed)
    s.stop()
    subprocess.run([SBX, "--home", str(home), "down"], capture_output=True, timeout=120)
    holders = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink("/proc/%s/fd/%s" % (pid, fd)).startswith(str(home) + "/")
                   for fd in os.listdir("/proc/%s/fd" % pid)):
                holders.append(pid)
        except OSError:
            pass
    assert holders == []


# ---- volumes ----

def test_volumes(sbxd, tmp_path):
    root = tmp_path / "vols"
    (root / "data").mkdir(parents=True)
    (root / "data" / "marker.txt").write_text("opensandbox-e2e-marker\n")
    os.chmod(root / "data", 0o777)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    os.symlink(str(outside), str(root / "escape"))
    s = sbxd(config="sbxd:\n  volume_roots: [%s]\n" % root)
    sb = s.create(volumes=[
        {"name": "rw", "host": {"path": str(root / "data")}, "mountPath": "/mnt/host-data"},
        {"name": "ro", "host": {"path": str(root / "data")}, "mountPath": "/mnt/host-ro", "readOnly": True},
        {"name": "named", "pvc": {"claimName": "shared"}, "mountPath": "/mnt/pvc"},
        {"name": "sub", "pvc": {"claimName": "shared"}, "subPath": "deep/er", "mountPath": "/mnt/sub"},
    ])
    out, last = sb.run("cat /mnt/host-data/marker.txt; echo written-from-sandbox > /mnt/host-data/out.txt && echo ok")
    assert out == ["opensandbox-e2e-marker", "ok"], last
    assert (root / "data" / "out.txt").read_text() == "written-from-sandbox\n"
    out, last = sb.run("touch /mnt/host-ro/x")
    assert last["type"] == "error" and not (root / "data" / "x").exists()
    # OpenSandbox's e2e "host volume mount (read-write)": a root-owned 0755 folder is writable
    # by root inside (idmapped to its owner), and what is written there is root's on the host;
    # not where the folder's file system cannot idmap (tmpfs before 6.3: `sbx doctor` says)
    doctor = subprocess.run([SBX, "--home", str(root), "doctor"], capture_output=True, text=True)
    if "[ok  ] idmapped" in doctor.stdout:
        (root / "rootown").mkdir(mode=0o755)
        sb4 = s.create(volumes=[{"name": "rw", "host": {"path": str(root / "rootown")},
                                 "mountPath": "/mnt/rw"}])
        out, last = sb4.run("echo w > /mnt/rw/f && stat -c %u /mnt/rw/f")
        assert out == ["0"], last
        st = os.lstat(root / "rootown" / "f")
        assert (st.st_uid, st.st_gid) == (0, 0), st
        assert s.req("DELETE", "/v1/sandboxes/" + sb4.id).status == 204
    out, _ = sb.run("echo in-sub > /mnt/sub/f; echo named > /mnt/pvc/g; ls /mnt/pvc /mnt/pvc/deep/er")
    assert "f" in out and "g" in out
    # a named volume outlives its sandbox and is shared by name
    assert s.req("DELETE", "/v1/sandboxes/" + sb.id).status == 204
    sb2 = s.create(volumes=[{"name": "again", "pvc": {"claimName": "shared"}, "mountPath": "/srv/vol"}])
    out, _ = sb2.run("cat /srv/vol/g /srv/vol/deep/er/f")
    assert out == ["named", "in-sub"]
    # host paths: missing ones are created (no symlink is followed), symlinks are refused
    sb3 = s.create(volumes=[{"name": "new", "host": {"path": str(root / "fresh" / "dir")}, "mountPath": "/fresh"}])
    assert (root / "fresh" / "dir").is_dir()
    out, _ = sb3.run("echo hi > /fresh/a && cat /fresh/a")
    assert out == ["hi"]
    for path, code in ((str(root / "escape"), "VOLUME::INVALID_HOST_PATH"),
                       (str(root / "escape" / "deeper"), "VOLUME::INVALID_HOST_PATH"),
                       (str(root) + "/../outside", "VOLUME::INVALID_HOST_PATH"),
                       (str(root) + "//data", "VOLUME::INVALID_HOST_PATH"),
                       (str(outside), "VOLUME::HOST_PATH_NOT_ALLOWED")):
        r = s.req("POST", "/v1/sandboxes", with_(volumes=[{"name": "x", "host": {"path": path}, "mountPath": "/x"}]))
        assert r.status == 400, (path, r.body)
        assert r.error()[0] == code, (path, r.body)
    r = s.req("POST", "/v1/sandboxes", with_(volumes=[{"name": "x", "host": {"path": str(root)}, "subPath": "escape", "mountPath": "/x"}]))
    assert r.status == 400 and "symbolic link" in r.error()[1]
    assert not (outside / "deeper").exists()
    assert len(sbx_ps(s.home)) == 2


# ---- files: large and aborted uploads, downloads ----

def test_upload_large_and_aborted(sbxd):
    s = sbxd()
    sb = s.create()
    size = 100 << 20
    block = os.urandom(1 << 20)
    digest = hashlib.sha256(block * 100).hexdigest()
    c = s.conn(timeout=300)
    c.putrequest("POST", sb.prefix + "/files/upload")
    c.putheader("X-EXECD-ACCESS-TOKEN", sb.token)
    c.putheader("Content-Type", "multipart/form-data; boundary=B0undary")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()

    def chunk(data):
        c.send(b"%x\r\n%s\r\n" % (len(data), data))

    chunk(b'--B0undary\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"/tmp/large/blob","mode":640}\r\n')
    chunk(b'--B0undary\r\nContent-Disposition: form-data; name="file"; filename="blob"\r\n\r\n')
    for _ in range(100):
        chunk(block)
    chunk(b"\r\n--B0undary--\r\n")
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    assert r.status == 200, r.read()
    r.read()
    c.close()
    info = sb.req("GET", "/files/info?path=/tmp/large/blob").json()["/tmp/large/blob"]
    assert info["size"] == size and info["mode"] == 640
    out, _ = sb.run("sha256sum /tmp/large/blob")
    assert out[0].split()[0] == digest

    # an upload cut off mid-file commits nothing
    sock = socket.create_connection((s.host, s.port), timeout=30)
    head = (b'--B\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"/tmp/partial"}\r\n'
            b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\n')
    sock.sendall(b"POST %s/files/upload HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
                 b"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n%s%s"
                 % (sb.prefix.encode(), sb.token.encode(), len(head) + (8 << 20), head, b"z" * (1 << 20)))
    time.sleep(0.3)
    sock.close()
    time.sleep(0.5)
    assert sb.req("GET", "/files/info?path=/tmp/partial").status == 404
    # malformed multipart: a 400 and nothing written
    body = b'--B\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"/tmp/m"}\r\n--B\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc'
    r = sb.req("POST", "/files/upload", body, {"Content-Type": "multipart/form-data; boundary=B"})
    assert r.status == 400 and r.error()[0] == "INVALID_FILE"
    assert sb.req("GET", "/files/info?path=/tmp/m").status == 404
    for parts, code in (([("file", "f", b"x")], "INVALID_FILE_METADATA"),
                        ([("metadata", "metadata", b'{"path":"/tmp/q"}')], "INVALID_FILE_CONTENT"),
                        ([("metadata", "metadata", b'{"path":""}'), ("file", "f", b"x")], "INVALID_FILE_METADATA"),
                        ([("metadata", "metadata", b"{}"), ("file", "f", b"x")], "INVALID_FILE_METADATA")):
        body, ctype = multipart(parts)
        r = sb.req("POST", "/files/upload", body, {"Content-Type": ctype})
        assert r.status == 400 and r.error()[0] == code, r.body
    r = sb.req("POST", "/files/upload", b"x", {"Content-Type": "text/plain"})
    assert r.status == 400 and r.error()[0] == "INVALID_FILE"
    # several pairs in one request (the Python SDK's write_files), the file before its metadata too
    body, ctype = multipart([("metadata", "metadata", b'{"path":"/tmp/p1"}'), ("file", "/tmp/p1", b"one"),
                             ("file", "x", b"two"), ("metadata", "metadata", b'{"path":"/tmp/p2","mode":600}')])
    r = sb.req("POST", "/files/upload", body, {"Content-Type": ctype})
    assert r.status == 200, r.body
    assert sb.req("GET", "/files/download?path=/tmp/p1").body == b"one"
    assert sb.req("GET", "/files/download?path=/tmp/p2").body == b"two"

    # downloads: ranges
    sb.write("/tmp/r.txt", b"0123456789")
    r = sb.req("GET", "/files/download?path=/tmp/r.txt", headers={"Range": "bytes=2-4"})
    assert r.status == 206 and r.body == b"234" and r.headers["content-range"] == "bytes 2-4/10"
    r = sb.req("GET", "/files/download?path=/tmp/r.txt", headers={"Range": "bytes=-3"})
    assert r.body == b"789"
    r = sb.req("GET", "/files/download?path=/tmp/r.txt", headers={"Range": "bytes=20-"})
    assert r.status == 416 and r.headers["content-range"] == "bytes */10"
    r = sb.req("GET", "/files/download?path=/tmp/r.txt", headers={"Range": "pages=1"})
    assert r.status == 416 and r.error()[0] == "UNKNOWN"
    # execd's path rules: "." and ".." resolved lexically, "~" is /root
    r = sb.req("GET", "/files/download?path=" + urllib.parse.quote("/tmp/none/../r.txt"))
    assert r.status == 200 and r.body == b"0123456789"
    assert sb.req("GET", "/files/download?path=/tmp/./r.txt").body == b"0123456789"
    r = sb.req("GET", "/files/download?path=/tmp/r.txt")
    assert r.headers["content-disposition"] == 'attachment; filename="r.txt"' and r.headers["content-length"] == "10"
    assert sb.req("GET", "/files/download?path=/tmp/r.txt&offset=0").status == 400


# ---- the port proxy ----

APP = r'''
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body, chunked=False):
        self.send_response(code)
        self.send_header("X-App", "yes")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (body[:3], body[3:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/chunked"):
            return self.reply(200, b"chunked-body", True)
        seen = ",".join(k for k in ("Authorization", "X-Execd-Access-Token", "Open-Sandbox-Api-Key", "X-Forwarded-For", "X-Custom") if self.headers.get(k))
        self.reply(200, ("path=%s seen=%s" % (self.path, seen)).encode())
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding") == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(n)
        self.reply(201, b"echo:" + data)
    def log_message(self, *a):
        pass
socketserver.TCPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
'''


def test_port_proxy(sbxd):
    s = sbxd()
    sb = s.create()
    sb.write("/tmp/app.py", APP.encode())
    sb.events("python3 /tmp/app.py", background=True)
    tok = {"X-EXECD-ACCESS-TOKEN": sb.token}
    for _ in range(100):
        r = s.req("GET", "/direct/%s/8000/hello?x=1" % sb.id, key=None, headers=tok)
        if r.status == 200:
            break
        time.sleep(0.1)
    assert r.status == 200, r.body
    assert r.body == b"path=/hello?x=1 seen=X-Forwarded-For"
    assert r.headers["x-app"] == "yes"
    r = s.req("GET", "/direct/%s/8000/h" % sb.id, headers=dict(tok, **{"Authorization": "Bearer t", "X-Custom": "c"}))
    assert r.body == b"path=/h seen=X-Forwarded-For,X-Custom"
    for prefix in ("/sandboxes/%s/proxy/8000" % sb.id, "/v1/sandboxes/%s/proxy/8000" % sb.id,
                   "/direct/%s/44772/proxy/8000" % sb.id, "/sandboxes/%s/proxy/44772/proxy/8000" % sb.id):
        r = s.req("GET", prefix + "/p%20q", key=None, headers=tok)
        assert r.status == 200 and r.body == b"path=/p%20q seen=X-Forwarded-For", (prefix, r.body)
    r = s.req("POST", "/direct/%s/8000/echo" % sb.id, b"payload", key=None, headers=tok)
    assert r.status == 201 and r.body == b"echo:payload"
    r = s.req("GET", "/direct/%s/8000/chunked" % sb.id, key=None, headers=tok)
    assert r.status == 200 and r.body == b"chunked-body"
    # a chunked request body is re-chunked to the app
    c = s.conn()
    c.putrequest("POST", "/direct/%s/8000/echo" % sb.id)
    c.putheader("X-EXECD-ACCESS-TOKEN", sb.token)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    c.send(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    r = c.getresponse()
    assert r.status == 201 and r.read() == b"echo:abcde"
    c.close()
    r = s.req("GET", "/direct/%s/8000/" % sb.id, key=None)
    assert r.status == 401
    r = s.req("GET", "/direct/%s/9999/" % sb.id, key=None, headers=tok)
    assert r.status == 502
    code, msg = r.error()
    assert code == "GENERAL::UNKNOWN_ERROR" and msg.startswith("Could not connect to the backend sandbox %s on port 9999" % sb.id)
    r = s.req("GET", "/direct/%s/8000/" % sb.id, key=None, headers=dict(tok, Upgrade="websocket", Connection="Upgrade"))
    assert r.status == 501


# ---- metrics ----

def test_metrics_and_watch(sbxd):
    s = sbxd()
    sb = s.create(resourceLimits={"cpu": "0.5", "memory": "512Mi"})
    m = sb.req("GET", "/metrics").json()
    assert m["cpu_count"] == 0.5 and m["mem_total_mib"] == 512.0
    assert 0 <= m["cpu_used_pct"] <= 100 and 0 <= m["mem_used_mib"] <= 512
    c = s.conn()
    c.request("GET", sb.prefix + "/metrics/watch", headers={"X-EXECD-ACCESS-TOKEN": sb.token})
    r = c.getresponse()
    assert r.status == 200
    lines = [json.loads(r.readline()) for _ in range(2)]
    assert all(l["cpu_count"] == 0.5 for l in lines)
    c.close()
    assert sb.req("GET", "/ping").status == 200


# ---- the contract JSON API ----

def test_contract_api(sbxd):
    s = sbxd()

    def op(sid, name, body, status=200):
        r = s.req("POST", "/v1/sandboxes/%s/contract/%s" % (sid, name), body)
        assert r.status == status, (name, r.body)
        return r.json()

    r = s.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t-1"})
    assert r.status == 200
    sid = r.json()["sandbox_id"]
    assert sid == hashlib.sha256(b"alice:t-1").hexdigest()[:16]
    assert s.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t-1"}).json()["sandbox_id"] == sid
    r = op(sid, "execute_command", {"command": "echo out; echo err >&2; exit 3"})
    assert r["output"] == "out\n\nStd Error:\nerr\n\nExit Code: 3" or r["output"].startswith("out")
    assert r["exit_code"] == 3 and r["stdout"] == "out\n" and r["stderr"] == "err\n"
    r = op(sid, "execute_command", {"command": "sleep 5", "timeout": 0.3})
    assert r["timed_out"] is True and r["exit_code"] == 124 and "Exit Code: 124" in r["output"]
    r = op(sid, "execute_command", {"command": "true", "env": {"1BAD": "x"}}, status=400)
    assert r["code"] == "SBX::INVALID"
    assert r["message"].startswith("extra_env key '1BAD' is not a valid POSIX environment variable name")
    assert op(sid, "execute_command", {"command": "echo $A", "env": {"A": "b"}})["stdout"] == "b\n"
    op(sid, "write_file", {"path": "/mnt/user-data/workspace/a.txt", "content": "l1\nl2\nl3\n"})
    op(sid, "write_file", {"path": "/mnt/user-data/workspace/a.txt", "content": "l4\n", "append": True})
    assert op(sid, "read_file", {"path": "/mnt/user-data/workspace/a.txt", "start_line": 2, "end_line": 3})["content"] == "l2\nl3"
    assert op(sid, "read_file", {"path": "/mnt/user-data/workspace/a.txt"})["content"] == "l1\nl2\nl3\nl4\n"
    op(sid, "update_file", {"path": "/mnt/user-data/outputs/b.bin", "content_base64": base64.b64encode(b"\x00\xffbin").decode()})
    r = op(sid, "download_file", {"path": "/mnt/user-data/outputs/b.bin"})
    assert base64.b64decode(r["content_base64"]) == b"\x00\xffbin" and r["size"] == 5
    r = op(sid, "download_file", {"path": "/etc/passwd"}, status=403)
    assert r == {"code": "SBX::DENIED", "message": "Access denied: path must be under '/mnt/user-data': '/etc/passwd'"}
    r = op(sid, "read_file", {"path": "/mnt/user-data/../etc/passwd"}, status=403)
    assert r["message"] == "Access denied: path traversal detected in '/mnt/user-data/../etc/passwd'"
    r = op(sid, "read_file", {"path": "/mnt/user-data/nope.txt"}, status=404)
    assert r["code"] == "SBX::NOT_FOUND"
    for i in range(5):
        op(sid, "write_file", {"path": "/mnt/user-data/workspace/g/f%d.py" % i, "content": "needle %d\n" % i})
    entries = op(sid, "list_dir", {"path": "/mnt/user-data/workspace", "max_depth": 1})["entries"]
    assert "/mnt/user-data/workspace/g/" in entries and "/mnt/user-data/workspace/a.txt" in entries
    r = op(sid, "glob", {"path": "/mnt/user-data/workspace", "pattern": "**/*.py", "max_results": 3})
    assert len(r["matches"]) == 3 and r["truncated"] is True
    r = op(sid, "glob", {"path": "/mnt/user-data/workspace", "pattern": "**/*.py"})
    assert len(r["matches"]) == 5 and r["truncated"] is False
    r = op(sid, "grep", {"path": "/mnt/user-data/workspace", "pattern": "needle [0-9]", "glob": "*.py", "max_results": 2})
    assert len(r["matches"]) == 2 and r["truncated"] is True
    assert set(r["matches"][0]) == {"path", "line_number", "line"} and r["matches"][0]["line_number"] == 1
    assert op(sid, "glob", {"path": "/mnt/user-data", "pattern": 5}, status=400)["code"] == "SBX::INVALID"
    r = s.req("POST", "/v1/sandboxes/%s/contract/read_file" % sid, "{bad")
    assert r.status == 400 and r.error()[0] == "SBX::INVALID"
    assert s.req("POST", "/v1/sandboxes/%s/contract/nope" % sid, {}).status == 404
    assert s.req("GET", "/v1/sandboxes/%s/contract/glob" % sid).status == 405
    assert s.req("POST", "/v1/contract/acquire", {"thread": "bad thread!"}).status == 400
    # the contract also works on a lifecycle sandbox
    sb = s.create()
    assert op(sb.id, "execute_command", {"command": "echo hi"})["output"] == "hi\n"
    # the scope sandbox is not an OpenSandbox sandbox
    assert s.req("GET", "/v1/sandboxes/" + sid).status == 404
    r = s.req("POST", "/v1/contract/release", {"sandbox_id": sid})
    assert r.status == 204
    assert s.req("POST", "/v1/contract/release", {"sandbox_id": sid}).status == 404
    assert op(sid, "read_file", {"path": "/mnt/user-data/workspace/a.txt"}, status=404)["code"] == "SBX::NOT_FOUND"
    warm = [x for x in sbx_ps(s.home) if x["id"] == sid]
    assert warm and warm[0]["state"] == "warm"
    # acquiring again reclaims the same sandbox with its files
    assert s.req("POST", "/v1/contract/acquire", {"user": "alice", "thread": "t-1"}).json()["sandbox_id"] == sid
    assert op(sid, "read_file", {"path": "/mnt/user-data/workspace/a.txt", "end_line": 1})["content"] == "l1"


def test_sandbox_death_mid_stream(sbxd):
    s = sbxd()
    sb = s.create()
    other = s.create()
    pid = next(x["pid"] for x in sbx_ps(s.home) if x["id"] == sb.id)
    result = {}

    def stream():
        result["events"] = sb.events("echo begin; sleep 30", timeout=60)

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    t.join(30)
    assert not t.is_alive()
    evs = result["events"]
    assert evs[0]["type"] == "init" and evs[-1]["type"] == "error"
    assert evs[-1]["error"]["ename"] == "CommandExecError"
    # the dead sandbox is reported (Failed, or gone once libsbx evicted it), the other one works
    r = s.req("GET", "/v1/sandboxes/" + sb.id)
    assert r.status == 404 or (r.status == 200 and r.json()["status"]["state"] == "Failed")
    assert sb.req("GET", "/ping").status in (404, 503)
    out, _ = other.run("echo alive")
    assert out == ["alive"]
    assert s.req("GET", "/health").status == 200


def spare_metas(home):
    d = os.path.join(str(home), "spare", "sandboxes")
    out = {}
    for sid in os.listdir(d) if os.path.isdir(d) else []:
        try:
            with open(os.path.join(d, sid, "meta")) as f:
                m = json.load(f)
            if m.get("pid", 0) > 0:
                out[sid] = m
        except (OSError, ValueError):
            pass
    return out


@pytest.mark.idmap
def test_spares_make_creates_fast_and_keep_managed_semantics(sbxd, tmp_path):
    """sandbox.spares: sbxd keeps spares ready; a create takes one, which then has the limits
    asked for and no idle expiry (a managed sandbox lives by its own timeout only)."""
    s = sbxd(config="sandbox:\n  spares: 2\n  idle_timeout: 1\n")
    deadline = time.time() + 20
    while time.time() < deadline and len(spare_metas(s.home)) < 2:
        time.sleep(0.05)
    before = spare_metas(s.home)
    assert len(before) == 2
    time.sleep(0.3)  # both spares' creators are done (the filler runs one at a time)
    sb = s.create(resourceLimits={"cpu": "0.5", "memory": "256Mi"})
    [box] = [x for x in sbx_ps(s.home) if x["id"] == sb.id]
    assert box["pid"] in [m["pid"] for m in before.values()]
    with open(os.path.join(s.home, "sandboxes", sb.id, "meta")) as f:
        cgroups = dict(l.split("=", 1) for l in json.load(f)["cgroups"].splitlines())
    if "unified" in cgroups:  # cgroup v2: one directory
        with open(cgroups["unified"] + "/memory.max") as f:
            assert int(f.read()) == 256 << 20
        with open(cgroups["unified"] + "/cpu.max") as f:
            assert f.read().split() == ["50000", "100000"]
    else:
        with open(cgroups["memory"] + "/memory.limit_in_bytes") as f:
            assert int(f.read()) == 256 << 20
        with open(cgroups["cpu"] + "/cpu.cfs_quota_us") as f:
            assert int(f.read()) == 50000
    out, end = sb.run("hostname; ls /mnt/user-data")
    assert out == ["sbx-" + sb.id, "outputs", "uploads", "workspace"], out
    sb.write("/mnt/user-data/workspace/a.txt", b"data")
    assert os.path.exists(os.path.join(s.home, "sandboxes", sb.id, "user-data/workspace/a.txt"))
    # refilled in the background
    deadline = time.time() + 20
    while time.time() < deadline and len(spare_metas(s.home)) < 2:
        time.sleep(0.05)
    assert len(spare_metas(s.home)) == 2
    # idle_timeout (1 s) applies to spares and scopes, never to a managed sandbox
    time.sleep(3.5)
    assert alive(box["pid"])
    out, _ = sb.run("echo still")
    assert out == ["still"]
    assert s.req("DELETE", "/v1/sandboxes/" + sb.id).status == 204
    assert not os.path.exists(os.path.join(s.home, "sandboxes", sb.id))


def test_directory_list_and_search_walk(sbxd):
    """execd's listing and name search (sbx-init's READDIR and FIND, on the search walker): every
    type, nothing ignored, symlinks reported and not followed, each directory's entries in byte
    order and each before its children, down to the depth asked."""
    sb = sbxd().create()
    out, end = sb.run("mkdir -p /tmp/lt/b/a /tmp/lt/node_modules && cd /tmp/lt && "
                      "echo 1 > a.txt && echo 2 > b/z.txt && echo 3 > b/a/deep.txt && "
                      "echo 4 > node_modules/x.txt && echo 5 > .hidden && ln -s / link && "
                      "mkfifo fifo && echo ok")
    assert out == ["ok\n"] or out == ["ok"], (out, end)
    want = [(".hidden", "file"), ("a.txt", "file"), ("b", "directory"), ("b/a", "directory"),
            ("b/z.txt", "file"), ("fifo", "other"), ("link", "symlink"),
            ("node_modules", "directory"), ("node_modules/x.txt", "file")]
    for path in ("/tmp/lt", "/tmp/lt/"):
        r = sb.req("GET", "/directories/list?depth=2&path=" + path)
        assert r.status == 200, r.body
        got = [(e["path"], e["type"]) for e in r.json()]
        assert got == [("/tmp/lt/" + p, t) for p, t in want], got
    r = sb.req("GET", "/directories/list?depth=1&path=/tmp/lt")
    assert [e["path"] for e in r.json()] == ["/tmp/lt/" + p for p, _ in want if "/" not in p]
    r = sb.req("GET", "/files/search?pattern=*.txt&path=/tmp/lt")
    assert r.status == 200, r.body
    assert [e["path"] for e in r.json()] == ["/tmp/lt/a.txt", "/tmp/lt/b/a/deep.txt",
                                             "/tmp/lt/b/z.txt", "/tmp/lt/node_modules/x.txt"]
