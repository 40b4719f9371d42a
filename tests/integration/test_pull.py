"""Pull from registries (docs/images.md, "Pull"): a real registry on loopback (Debian's
docker-registry, distribution v2) started here with a config written here, filled by skopeo from
OCI layouts built here (tests/images/mkimage.py); a token server and a fault proxy in this file.
Nothing leaves 127.0.0.1 (the suites run with SBX_PULL=never, so a name another test expects
to be missing is never looked up on Docker Hub; the implicit pulls here turn it back on)."""
import base64
import crypt
import gzip
import hashlib
import http.client
import http.server
import json
import os
import pty
import random
import select
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from conftest import SBX, SOURCE, free_port

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402

REGISTRY = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"


class Registry:
    """docker-registry serving 127.0.0.1:<port> from a storage root of its own."""

    def __init__(self, tmp, name="reg", auth=None):
        self.dir = os.path.join(str(tmp), name)
        os.makedirs(self.dir, exist_ok=True)
        self.root = os.path.join(self.dir, "data")
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        cfg = {"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
               "storage": {"filesystem": {"rootdirectory": self.root},
                           "delete": {"enabled": True}},
               "http": {"addr": self.host}}
        if auth:
            cfg["auth"] = auth
        self.config = os.path.join(self.dir, "config.yml")
        with open(self.config, "w") as f:
            json.dump(cfg, f)  # JSON is YAML
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen([REGISTRY, "serve", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/v2/")
                c.getresponse().read()
                c.close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("docker-registry did not start: " +
                                       open(os.path.join(self.dir, "log")).read())
                time.sleep(0.05)

    def push(self, layout, ref, creds=None, all_=False):
        args = [SKOPEO, "copy", "-q", "--dest-tls-verify=false"] + (["--all"] if all_ else [])
        if creds:
            args += ["--dest-creds", creds]
        subprocess.run(args + ["oci:" + layout, "docker://%s/%s" % (self.host, ref)], check=True,
                       capture_output=True, timeout=120)

    def manifest(self, repo, tag):
        """The manifest as the registry has it (skopeo compresses layers on the way in)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/v2/%s/manifests/%s" % (repo, tag), headers={"Accept": ", ".join([
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json"])})
        r = c.getresponse()
        body = r.read()
        c.close()
        assert r.status == 200, (r.status, body)
        return "sha256:" + hashlib.sha256(body).hexdigest(), json.loads(body)

    def blob(self, digest):
        h = digest.split(":")[1]
        return os.path.join(self.root, "docker/registry/v2/blobs/sha256", h[:2], h, "data")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def registry(tmp_path):
    regs = []

    def make(**kw):
        r = Registry(tmp_path, name="reg%d" % len(regs), **kw)
        regs.append(r)
        return r

    yield make
    for r in regs:
        r.stop()


class Proxy:
    """An HTTP proxy to a registry that counts requests and injects faults: `cut` blob answers
    closed after N bytes, `status` answers (e.g. 429) on paths, `delay` seconds per 64 KiB."""

    def __init__(self, upstream_port):
        self.up = upstream_port
        self.log = []
        self.cut = {}       # path substring -> [times, bytes]
        self.status = {}    # path substring -> [times, code]
        self.redirect = {}  # path substring -> Location (a 307)
        self.delay = 0.0
        self.lock = threading.Lock()
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with proxy.lock:
                    proxy.log.append(self.path)
                    st = next((v for k, v in proxy.status.items() if k in self.path and v[0]), None)
                    if st:
                        st[0] -= 1
                    cut = next((v for k, v in proxy.cut.items() if k in self.path and v[0]), None)
                    if cut:
                        cut[0] -= 1
                loc = next((v for k, v in proxy.redirect.items() if k in self.path), None)
                if loc:
                    self.send_response(307)
                    self.send_header("Location", loc.replace("{path}", self.path))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if st:
                    body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}'
                    self.send_response(st[1])
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(body)
                    return
                c = http.client.HTTPConnection("127.0.0.1", proxy.up, timeout=30)
                hdrs = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                c.request("GET", self.path, headers=hdrs)
                r = c.getresponse()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding"):
                        self.send_header(k, v)
                if r.getheader("Content-Length") is None:
                    self.send_header("Content-Length", "0")
                self.end_headers()
                sent = 0
                while True:
                    chunk = r.read(65536)
                    if not chunk:
                        break
                    if cut and sent + len(chunk) > cut[1]:
                        self.wfile.write(chunk[:max(0, cut[1] - sent)])
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        c.close()
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if proxy.delay:
                        time.sleep(proxy.delay)
                c.close()

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = S(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.host = "127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gets(self, what):
        with self.lock:
            return [p for p in self.log if what in p]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy():
    made = []

    def make(port):
        p = Proxy(port)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


def layout(tmp_path, name, layers, comp="gzip", **kw):
    out = str(tmp_path / name)
    mkimage.build_oci(out, [(name, layers, comp)], as_dir=True, **kw)
    return out


def manifest_of(path):
    idx = json.load(open(os.path.join(path, "index.json")))
    d = idx["manifests"][0]["digest"]
    return d, json.load(open(os.path.join(path, "blobs", "sha256", d.split(":")[1])))


def hello_layer(text=b"hi\n"):
    return mkimage.layer([("hello", text)])


def images(sbx):
    return {i["name"]: i for i in sbx.json("images", "--json")["images"]}


def store_blobs(sbx):
    d = os.path.join(sbx.home, "images", "blobs", "sha256")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


@pytest.mark.idmap
def test_anonymous_pull_run_and_reuse(sbx, registry, proxy, tmp_path, monkeypatch):
    reg = registry()
    # gzip without a time stamp: the same layer is the same blob in both images
    orig = mkimage.compress
    monkeypatch.setattr(mkimage, "compress", lambda data, how: (
        gzip.compress(data, 1, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
        if how == "gzip" else orig(data, how))
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
    reg.push(lay, "test/bb:1")
    px = proxy(reg.port)
    ref = px.host + "/test/bb:1"
    p = sbx.run("pull", ref, check=0)
    assert p.stdout.decode() == ref + "\n"
    err = p.stderr.decode()
    assert err.count("verified") == 3, err  # config and two layers
    assert ref in images(sbx)
    _, m = reg.manifest("test/bb", "1")
    for d in [m["config"]["digest"]] + [l["digest"] for l in m["layers"]]:
        assert d.split(":")[1] in store_blobs(sbx)
    # nothing left in the work area but the cache's lock files
    tmp = os.path.join(sbx.home, "images", "tmp")
    assert [f for f in os.listdir(tmp) if f != "pull-cache"] == []
    assert all(f.endswith(".lock") for f in os.listdir(os.path.join(tmp, "pull-cache")))
    out = sbx.run("exec", "-t", "a", "--image", ref, "--json", "--", "cat /hello; echo $IMAGE_VAR",
                  check=0)
    j = json.loads(out.stdout)
    assert j["stdout"] == "hi\nfrom-image\n", j
    # a second pull fetches no blob again; an image sharing the busybox layer fetches only its own
    n = len(px.gets("/blobs/"))
    p = sbx.run("pull", ref, check=0)
    assert p.stderr.decode().count("already in the store") == 3
    assert len(px.gets("/blobs/")) == n
    lay2 = layout(tmp_path, "bb2", [mkimage.busybox_layer(), hello_layer(b"two\n")])
    reg.push(lay2, "test/bb:2")
    p = sbx.run("pull", "--quiet", px.host + "/test/bb:2", check=0)
    assert p.stderr == b"" and p.stdout.decode() == px.host + "/test/bb:2\n"
    _, m2 = reg.manifest("test/bb", "2")
    assert m2["layers"][0]["digest"] == m["layers"][0]["digest"]
    assert len(px.gets(m2["layers"][0]["digest"])) == 1  # busybox: by the first pull only
    assert len(px.gets(m2["layers"][1]["digest"])) == 1


def test_pull_by_digest_and_bad_references(sbx, registry, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer()])
    reg.push(lay, "test/bb:1")
    # skopeo may rewrite the manifest (gzip layers are kept): ask the registry for its digest
    c = http.client.HTTPConnection("127.0.0.1", reg.port)
    c.request("GET", "/v2/test/bb/manifests/1",
              headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    r = c.getresponse()
    digest = "sha256:" + hashlib.sha256(r.read()).hexdigest()
    ref = "%s/test/bb@%s" % (reg.host, digest)
    assert sbx.ok("pull", "-q", ref) == ref + "\n"
    assert ref in images(sbx)
    wrong = "%s/test/bb@sha256:%s" % (reg.host, "0" * 64)
    p = sbx.run("pull", wrong, check=1)
    assert b"registry " + reg.host.encode() + b", repository test/bb" in p.stderr
    for bad, why in [("Upper/case", b"bad name component"), ("a:b:c", b"bad name component"),
                     ("x@sha256:12", b"64 lower-case hex"), ("x:.bad", b"bad tag"),
                     ("", b"empty image reference")]:
        p = sbx.run("pull", bad, check=1)
        assert why in p.stderr, (bad, p.stderr)
    assert len(images(sbx)) == 1


@pytest.mark.idmap
def test_manifest_list_and_platform(sbx, registry, tmp_path):
    reg = registry()
    out = str(tmp_path / "multi")
    mkimage.build_oci(out, [("multi", [mkimage.busybox_layer(), hello_layer(b"amd64\n")], "gzip"),
                            ("multi", [mkimage.busybox_layer(), hello_layer(b"arm64\n")], "gzip")],
                      as_dir=True, index_list=True)
    reg.push(out, "test/multi:1", all_=True)
    ref = reg.host + "/test/multi:1"
    sbx.ok("pull", "-q", ref)
    j = json.loads(sbx.run("exec", "-t", "m", "--image", ref, "--json", "--", "cat /hello",
                           check=0).stdout)
    assert j["stdout"] == "amd64\n"
    amd = images(sbx)[ref]["digest"]
    sbx.ok("pull", "-q", "--platform", "linux/arm64", ref)
    assert images(sbx)[ref]["digest"] != amd
    p = sbx.run("pull", "--platform", "linux/s390x", ref, check=1)
    assert b"s390x" in p.stderr


def test_platform_of_a_single_manifest_image(sbx, registry, tmp_path):
    # no index to pick from: --platform is checked against the image's config, not ignored
    reg = registry()
    reg.push(layout(tmp_path, "bb", [mkimage.busybox_layer()]), "test/single:1")
    ref = reg.host + "/test/single:1"
    p = sbx.run("pull", "--platform", "linux/arm64", ref, check=1)
    assert b"is for linux/amd64, not the platform asked for (linux/arm64)" in p.stderr, p.stderr
    assert images(sbx) == {}
    sbx.ok("pull", "-q", "--platform", "linux/amd64", ref)
    assert ref in images(sbx)


def test_corrupted_blob_stores_nothing(sbx, registry, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
    reg.push(lay, "test/bb:1")
    _, m = reg.manifest("test/bb", "1")
    bad = m["layers"][0]["digest"]
    path = reg.blob(bad)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    p = sbx.run("pull", reg.host + "/test/bb:1", check=1)
    assert b"blob " + bad.encode() + b" does not match its digest" in p.stderr, p.stderr
    assert b"registry " + reg.host.encode() in p.stderr
    assert images(sbx) == {}
    assert bad.split(":")[1] not in store_blobs(sbx)
    cache = os.path.join(sbx.home, "images", "tmp", "pull-cache")
    assert not any(f.startswith(bad.split(":")[1]) and not f.endswith(".lock")
                   for f in os.listdir(cache))


def test_errors_name_registry_and_repository(sbx, registry, proxy, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer()])
    reg.push(lay, "test/bb:1")
    p = sbx.run("pull", reg.host + "/test/bb:nope", check=1)
    assert (b"registry %s, repository test/bb: manifest `nope`: not found (HTTP 404)" %
            reg.host.encode()) in p.stderr, p.stderr
    p = sbx.run("pull", reg.host + "/test/none:1", check=1)
    assert b"not found (HTTP 404)" in p.stderr and b"repository test/none" in p.stderr
    px = proxy(reg.port)
    px.status["/manifests/"] = [100, 429]
    t = time.time()
    p = sbx.run("pull", px.host + "/test/bb:1", check=1)
    assert b"too many requests" in p.stderr and b"HTTP 429" in p.stderr, p.stderr
    assert b"TOOMANYREQUESTS: slow down" in p.stderr
    assert len(px.gets("/manifests/")) == 5  # retried, then gave up
    assert time.time() - t < 20
    # a 503 once is retried and the pull succeeds
    px.status["/manifests/"] = [1, 503]
    sbx.ok("pull", "-q", px.host + "/test/bb:1")
    # nothing listening
    p = sbx.run("pull", "127.0.0.1:%d/x:1" % free_port(), check=1)
    assert b"repository x: manifest `1`" in p.stderr
    assert list(images(sbx)) == [px.host + "/test/bb:1"]


def htpasswd(path, user, password):
    h = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH)).replace("$2b$", "$2y$", 1)
    with open(path, "w") as f:
        f.write("%s:%s\n" % (user, h))


def test_basic_auth(sbx, registry, tmp_path):
    hp = str(tmp_path / "htpasswd")
    htpasswd(hp, "alice", "s3cret")
    reg = registry(auth={"htpasswd": {"realm": "test", "path": hp}})
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer()])
    reg.push(lay, "priv/bb:1", creds="alice:s3cret")
    ref = reg.host + "/priv/bb:1"
    p = sbx.run("pull", ref, check=1, env={"HOME": str(tmp_path), "DOCKER_CONFIG": ""})
    assert b"asks for a user name and password (none configured)" in p.stderr, p.stderr
    p = sbx.run("pull", "--username", "alice", "--password-stdin", ref, input="wrong\n", check=1)
    assert b"the credentials were refused" in p.stderr and b"HTTP 401" in p.stderr, p.stderr
    assert b"wrong" not in p.stderr
    p = sbx.run("pull", "-q", "--username", "alice", "--password-stdin", ref, input="s3cret\n",
                check=0)
    assert p.stdout.decode() == ref + "\n"
    # a Docker-style auths file
    sbx.ok("rmi", ref)
    auths = str(tmp_path / "auths.json")
    with open(auths, "w") as f:
        json.dump({"auths": {reg.host: {"auth": base64.b64encode(b"alice:s3cret").decode()}}}, f)
    sbx.ok("pull", "-q", "--auth-file", auths, ref)
    sbx.ok("rmi", ref)
    sbx.ok("pull", "-q", ref, env={"REGISTRY_AUTH_FILE": auths})
    assert ref in images(sbx)
    # the password is nowhere in the store
    for root, _, files in os.walk(sbx.home):
        for f in files:
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                assert b"s3cret" not in open(p, "rb").read(), p


class TokenServer:
    """The registry's token mode: a JWT (RS256, signed by openssl with a key whose certificate
    the registry trusts, sent in the x5c header) for whatever scope is asked, to alice only
    (or to anyone when anonymous is True)."""

    def __init__(self, tmp, anonymous=False, expires_in=2):
        d = str(tmp)
        self.key = os.path.join(d, "token.key")
        self.cert = os.path.join(d, "token.crt")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        self.key, "-out", self.cert, "-days", "2", "-subj", "/CN=sbx-test-token"],
                       check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", self.cert, "-outform", "der"], check=True,
                             capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.requests = []
        ts = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                auth = self.headers.get("Authorization", "")
                ts.requests.append((q, auth))
                ok = auth == "Basic " + base64.b64encode(b"alice:s3cret").decode()
                if not ok and not anonymous:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                access = []
                for s in q.get("scope", []):
                    typ, name, actions = s.split(":")
                    access.append({"type": typ, "name": name, "actions": actions.split(",")})
                body = json.dumps({"token": ts.jwt(q.get("service", [""])[0], access),
                                   "expires_in": expires_in}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.realm = "http://127.0.0.1:%d/token" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jwt(self, service, access):
        def b64(b):
            return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
        now = int(time.time())
        head = b64(json.dumps({"alg": "RS256", "typ": "JWT", "x5c": [self.x5c]}).encode())
        claims = b64(json.dumps({"iss": "sbx-test", "sub": "alice", "aud": service,
                                 "exp": now + 300, "nbf": now - 10, "iat": now,
                                 "jti": os.urandom(8).hex(), "access": access}).encode())
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.key],
                             input=(head + "." + claims).encode(), capture_output=True,
                             check=True).stdout
        return head + "." + claims + "." + b64(sig)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.idmap
def test_bearer_token_auth(sbx, registry, tmp_path):
    ts = TokenServer(tmp_path, expires_in=1)
    try:
        reg = registry(auth={"token": {"realm": ts.realm, "service": "sbx-registry",
                                       "issuer": "sbx-test", "rootcertbundle": ts.cert}})
        lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
        reg.push(lay, "tok/bb:1", creds="alice:s3cret")
        ref = reg.host + "/tok/bb:1"
        n = len(ts.requests)
        p = sbx.run("pull", ref, check=1, env={"HOME": str(tmp_path)})
        assert b"token server" in p.stderr and b"refused an anonymous pull" in p.stderr, p.stderr
        assert len(ts.requests) == n + 1 and ts.requests[-1][1] == ""
        p = sbx.run("pull", "-q", "--username", "alice", "--password-stdin", ref,
                    input="s3cret", check=0)
        assert p.stdout.decode() == ref + "\n"
        q, auth = ts.requests[-1]
        assert q["service"] == ["sbx-registry"] and q["scope"] == ["repository:tok/bb:pull"]
        assert auth.startswith("Basic ")
        j = json.loads(sbx.run("exec", "-t", "b", "--image", ref, "--json", "--", "cat /hello",
                               check=0).stdout)
        assert j["stdout"] == "hi\n"
    finally:
        ts.stop()


def test_bearer_anonymous_token(sbx, registry, tmp_path):
    ts = TokenServer(tmp_path, anonymous=True, expires_in=300)
    try:
        reg = registry(auth={"token": {"realm": ts.realm, "service": "sbx-registry",
                                       "issuer": "sbx-test", "rootcertbundle": ts.cert}})
        lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
        reg.push(lay, "pub/bb:1", creds="alice:s3cret")
        n = len(ts.requests)
        sbx.ok("pull", "-q", reg.host + "/pub/bb:1", env={"HOME": str(tmp_path)})
        # one token, cached for its lifetime, for the manifest and the three blobs
        assert len(ts.requests) == n + 1 and ts.requests[-1][1] == ""
    finally:
        ts.stop()


def test_mirror_misses_then_hits(sbx, registry, tmp_path):
    origin, mirror = registry(), registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer()])
    origin.push(lay, "test/bb:1")
    ref = origin.host + "/test/bb:1"
    mir = "--mirror=%s=%s" % (origin.host, mirror.host)
    sbx.ok("pull", "-q", mir, ref)  # the mirror has nothing: the origin answers
    sbx.ok("rmi", ref)
    sbx.ok("image", "prune")
    mirror.push(lay, "test/bb:1")
    origin.stop()
    assert sbx.ok("pull", "-q", mir, ref) == ref + "\n"  # the origin is gone: the mirror
    assert ref in images(sbx)


@pytest.mark.idmap
def test_registry_dies_mid_blob_resumes(sbx, registry, proxy, tmp_path):
    reg = registry()
    big = mkimage.layer([("big", os.urandom(3 << 20))])
    lay = layout(tmp_path, "big", [mkimage.busybox_layer(), big], comp=None)
    reg.push(lay, "test/big:1")
    _, m = reg.manifest("test/big", "1")
    d = m["layers"][1]["digest"]
    px = proxy(reg.port)
    px.cut[d] = [2, 1 << 20]  # twice: the connection closes after 1 MiB
    ref = px.host + "/test/big:1"
    sbx.ok("pull", "-q", ref)
    assert len(px.gets(d)) == 3
    j = json.loads(sbx.run("exec", "-t", "r", "--image", ref, "--json", "--",
                           "wc -c < /big", check=0).stdout)
    assert j["stdout"].strip() == str(3 << 20)


@pytest.mark.idmap
def test_pull_killed_at_random_points(sbx, registry, proxy, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "big", [mkimage.busybox_layer(),
                                   mkimage.layer([("a", os.urandom(2 << 20))]),
                                   mkimage.layer([("b", os.urandom(2 << 20))])], comp=None)
    reg.push(lay, "test/big:1")
    px = proxy(reg.port)
    px.delay = 0.01
    ref = px.host + "/test/big:1"
    rnd = random.Random(1234)
    for i in range(6):
        p = subprocess.Popen(sbx.cmd("pull", "-q", ref), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        time.sleep(rnd.uniform(0.05, 1.2))
        p.send_signal(signal.SIGKILL)
        p.communicate()
        # nothing half-visible: the image is either listed whole or not at all
        imgs = images(sbx)
        if ref in imgs:
            sbx.ok("rmi", ref)
    n = len(px.gets("/blobs/"))
    px.delay = 0
    sbx.ok("pull", "-q", ref)
    j = json.loads(sbx.run("exec", "-t", "k", "--image", ref, "--json", "--",
                           "wc -c < /a; wc -c < /b", check=0).stdout)
    assert j["stdout"].split() == [str(2 << 20)] * 2
    assert len(px.gets("/blobs/")) - n <= 3
    sbx.ok("rm", "-t", "k")
    sbx.ok("image", "prune")
    assert os.listdir(os.path.join(sbx.home, "images", "tmp")) == []


def test_two_concurrent_pulls_fetch_once(sbx, registry, proxy, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "big", [mkimage.busybox_layer(),
                                   mkimage.layer([("a", os.urandom(2 << 20))])], comp=None)
    reg.push(lay, "test/big:1")
    px = proxy(reg.port)
    px.delay = 0.005
    ref = px.host + "/test/big:1"
    ps = [subprocess.Popen(sbx.cmd("pull", "-q", ref), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert all(o[0].decode() == ref + "\n" for o in outs)
    _, m = reg.manifest("test/big", "1")
    for d in [m["config"]["digest"]] + [l["digest"] for l in m["layers"]]:
        assert len(px.gets("/blobs/" + d)) == 1, (d, px.log)


def test_progress_on_a_terminal(sbx, registry, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
    reg.push(lay, "test/bb:1")
    master, slave = pty.openpty()
    p = subprocess.Popen(sbx.cmd("pull", reg.host + "/test/bb:1"), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(30)
    os.close(master)
    assert p.returncode == 0
    assert b"\x1b[" in out and b"Pull complete" in out and b"total" in out and b"ETA" in out, out
    assert b"MB/s" in out or b"kB/s" in out


@pytest.mark.idmap
def test_implicit_pull_on_first_use(sbx, registry, tmp_path, monkeypatch):
    monkeypatch.delenv("SBX_PULL", raising=False)
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer(b"implicit\n")])
    reg.push(lay, "test/bb:1")
    ref = reg.host + "/test/bb:1"
    j = json.loads(sbx.run("exec", "-t", "i", "--image", ref, "--json", "--", "cat /hello",
                           check=0).stdout)
    assert j["stdout"] == "implicit\n"
    assert ref in images(sbx)
    p = sbx.run("exec", "-t", "j", "--image", reg.host + "/test/bb:missing", "--", "true",
                check=1)
    assert b"not in the store, and pulling it failed" in p.stderr
    assert b"not found (HTTP 404)" in p.stderr
    # the configured default image
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  image: %s\n" % ref)
    sbx.ok("rm", "-t", "i")
    sbx.ok("rmi", ref)
    s2 = type(sbx)(sbx.home, str(cfg))
    j = json.loads(s2.run("exec", "-t", "c", "--json", "--", "cat /hello", check=0).stdout)
    assert j["stdout"] == "implicit\n"
    s2.ok("rm", "-t", "c")
    sbx.ok("rmi", ref)
    p = s2.run("exec", "-t", "d", "--", "true", env={"SBX_PULL": "never"}, check=1)
    assert b"SBX_PULL=never: image `%s` is not in the store" % ref.encode() in p.stderr, p.stderr


from test_sbxd_http import sbxd  # noqa: E402,F401  (the fixture)


def wait_state(s, sid, while_in, timeout=60):
    """GET /sandboxes/{sid} until its state is no longer while_in."""
    deadline = time.time() + timeout
    while True:
        r = s.req("GET", "/v1/sandboxes/%s" % sid)
        assert r.status == 200, r.body
        if r.json()["status"]["state"] != while_in or time.time() > deadline:
            return r.json()
        time.sleep(0.05)


def test_sbxd_pending_while_pulling_then_deleted(sbxd, registry, tmp_path, monkeypatch):
    # a DELETE while the create pulls: the sandbox it then makes is removed, nothing is left
    monkeypatch.delenv("SBX_PULL", raising=False)
    reg = registry()
    reg.push(layout(tmp_path, "bb", [mkimage.busybox_layer(),
                                     mkimage.layer([("big", os.urandom(30 << 20))])]), "t/big:1")
    s = sbxd(home=tmp_path / "home")
    body = {"image": {"uri": reg.host + "/t/big:1"}, "entrypoint": ["sleep", "1000"],
            "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "timeout": 600}
    r = s.req("POST", "/v1/sandboxes", body)
    assert r.status == 202 and r.json()["status"]["state"] == "Pending", r.body
    sid = r.json()["id"]
    assert s.req("DELETE", "/v1/sandboxes/%s" % sid).status == 204
    assert s.req("GET", "/v1/sandboxes/%s" % sid).status == 404
    deadline = time.time() + 60
    while not any("sandbox created" in json.dumps(l) or "sandbox create failed" in json.dumps(l)
                  for l in s.logs):
        assert time.time() < deadline
        time.sleep(0.1)
    time.sleep(0.5)
    assert s.req("GET", "/v1/sandboxes").json()["items"] == []
    ps = subprocess.run([SBX, "--home", str(tmp_path / "home"), "ps", "--json"],
                        capture_output=True, timeout=60)
    assert json.loads(ps.stdout)["sandboxes"] == [], ps.stdout


@pytest.mark.idmap
def test_sbxd_image_uri_pulls_with_image_auth(sbxd, registry, tmp_path, monkeypatch):
    monkeypatch.delenv("SBX_PULL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.docker/config.json of the host
    hp = str(tmp_path / "htpasswd")
    htpasswd(hp, "alice", "s3cret")
    reg = registry(auth={"htpasswd": {"realm": "test", "path": hp}})
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer(b"from sbxd\n")])
    reg.push(lay, "priv/bb:1", creds="alice:s3cret")
    ref = reg.host + "/priv/bb:1"
    s = sbxd(home=tmp_path / "home")
    body = {"image": {"uri": ref}, "entrypoint": ["sleep", "1000"],
            "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "timeout": 600}
    # a create that pulls answers at once, Pending with a reason; the pull's failure shows later
    r = s.req("POST", "/v1/sandboxes", body)
    assert r.status == 202, r.body
    failed = r.json()
    assert failed["status"]["state"] == "Pending" and failed["status"]["reason"] == "IMAGE_PULLING"
    got = wait_state(s, failed["id"], "Pending")
    assert got["status"]["state"] == "Failed" and got["status"]["reason"] == "PROVISIONING_ERROR"
    assert "asks for a user name and password" in got["status"]["message"], got
    assert got["image"] == {"uri": ref}
    assert failed["id"] in [i["id"] for i in s.req("GET", "/v1/sandboxes").json()["items"]]
    assert s.req("DELETE", "/v1/sandboxes/%s" % failed["id"]).status == 204
    assert s.req("GET", "/v1/sandboxes/%s" % failed["id"]).status == 404
    body["image"]["auth"] = {"username": "alice", "password": "s3cret"}
    sb = s.create(**body)  # its endpoint is known while it is Pending
    assert wait_state(s, sb.id, "Pending")["status"]["state"] == "Running"
    out, last = sb.run("cat /hello")
    assert [l.strip() for l in out] == ["from sbxd"], (out, last)
    assert s.req("DELETE", "/v1/sandboxes/%s" % sb.id).status == 204
    # the pull's progress is in sbxd's JSON log; the password is not
    msgs = [json.dumps(r) for r in s.logs]
    assert any("fetched" in m and "verified" in m and ref in m for m in msgs), msgs[-20:]
    assert not any("s3cret" in m for m in msgs)
    for root, _, files in os.walk(str(tmp_path / "home")):
        for f in files:
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                assert b"s3cret" not in open(p, "rb").read(), p


@pytest.mark.idmap
def test_config_registries_and_mirrors(monkeypatch, make_sbx, registry, tmp_path):
    # monkeypatch first: set up before make_sbx, undone after its `down`, whose configuration
    # reads $SBX_TEST_REG_PW (undone first, the down failed and the sandbox outlived the test)
    monkeypatch.delenv("SBX_PULL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SBX_TEST_REG_PW", "s3cret")
    hp = str(tmp_path / "htpasswd")
    htpasswd(hp, "alice", "s3cret")
    reg = registry(auth={"htpasswd": {"realm": "test", "path": hp}})
    mirror = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer(b"configured\n")])
    reg.push(lay, "priv/bb:1", creds="alice:s3cret")
    reg.push(lay, "priv/bb:2", creds="alice:s3cret")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sandbox:\n  registries:\n    \"%s\":\n      username: alice\n"
                   "      password: $SBX_TEST_REG_PW\n  registry_mirrors:\n    - \"%s=%s\"\n"
                   % (reg.host, reg.host, mirror.host))
    s = make_sbx(config=str(cfg))
    shown = s.ok("config", "show")
    assert "registries:" in shown and "alice" in shown and "s3cret" not in shown, shown
    assert "%s=%s" % (reg.host, mirror.host) in shown
    ref = reg.host + "/priv/bb:1"
    assert s.ok("pull", "-q", ref) == ref + "\n"  # the mirror misses, the origin with config creds
    # the implicit pull uses them too
    j = json.loads(s.run("exec", "-t", "c", "--image", reg.host + "/priv/bb:2", "--json", "--",
                         "cat /hello", check=0).stdout)
    assert j["stdout"] == "configured\n"
    # then the mirror has it and the origin is gone
    mirror.push(lay, "priv/bb:1")
    reg.stop()
    s.ok("rmi", ref)
    assert s.ok("pull", "-q", ref) == ref + "\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("sandbox:\n  registries:\n    \"x.io\":\n      username: a\n")
    p = make_sbx(config=str(bad)).run("pull", "x.io/a")
    assert p.returncode != 0 and b"username and password go together" in p.stderr, p.stderr
    bad.write_text("sandbox:\n  registry_mirrors: [\"http://m/x\"]\n")
    p = make_sbx(config=str(bad)).run("pull", "x.io/a")
    assert p.returncode != 0 and b"registry_mirrors[0]" in p.stderr, p.stderr


def test_redirects_followed_over_http_only(sbx, registry, proxy, tmp_path):
    reg = registry()
    lay = layout(tmp_path, "bb", [mkimage.busybox_layer(), hello_layer()])
    reg.push(lay, "test/bb:1")
    _, m = reg.manifest("test/bb", "1")
    d = m["layers"][0]["digest"]
    px = proxy(reg.port)
    ref = px.host + "/test/bb:1"
    for loc in ["file:///etc/passwd", "ftp://127.0.0.1:%d/x" % free_port(),
                "gopher://127.0.0.1/x"]:
        px.redirect = {d: loc}
        p = sbx.run("pull", ref, check=1)
        assert b"blob " + d.encode() in p.stderr and b"registry " + px.host.encode() in p.stderr
        assert images(sbx) == {}
    # to the registry's storage (here: the registry itself, on another port): followed
    px.redirect = {d: "http://%s{path}" % reg.host}
    assert sbx.ok("pull", "-q", ref) == ref + "\n"
    assert len(px.gets(d)) == 4


def test_sbxd_image_uri_over_the_image_budget(sbxd, registry, tmp_path, monkeypatch):
    """Any client of sbxd makes it pull through image.uri: a small image of many layers of
    zeros, each under the per-layer cap, is refused by the whole image's budget (issue 28), the
    sandbox Failed with the reason, and nothing of the image stays in the store."""
    monkeypatch.delenv("SBX_PULL", raising=False)
    reg = registry()
    zeros = [mkimage.layer([("z%d" % i, b"\0" * (3 << 20))]) for i in range(5)]
    reg.push(layout(tmp_path, "zeros", [mkimage.busybox_layer()] + zeros), "t/zeros:1")
    home = tmp_path / "home"
    s = sbxd(home=home, config="sandbox:\n  image_layer_max_mib: 4\n  image_max_mib: 8\n")
    body = {"image": {"uri": reg.host + "/t/zeros:1"}, "entrypoint": ["sleep", "1000"],
            "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "timeout": 600}
    r = s.req("POST", "/v1/sandboxes", body)
    assert r.status == 202, r.body
    got = wait_state(s, r.json()["id"], "Pending")
    assert got["status"]["state"] == "Failed", got
    assert "sandbox.image_max_mib" in got["status"]["message"], got
    assert s.req("DELETE", "/v1/sandboxes/%s" % got["id"]).status == 204
    store = home / "images"
    assert os.listdir(store / "layers") == []
    assert [f for f in os.listdir(store / "tmp") if f != "pull-cache"] == []
    assert [f for f in os.listdir(store / "tmp" / "pull-cache") if not f.endswith(".lock")] == []
    assert os.listdir(store / "blobs" / "sha256") == []
