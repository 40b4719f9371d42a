"""DeerFlow's provisioner API and the AIO sandbox API in sbxd, over raw HTTP (stdlib only).

The provisioner's shapes, status codes and errors are docker/provisioner/app.py's (bytedance/
deer-flow); the AIO routes and fields are agent-infra/sandbox's openapi.json. Each test starts its
own sbxd on 127.0.0.1 with an ephemeral port, a temporary --home and app.py's environment
(PROVISIONER_API_KEY, THREADS_HOST_PATH, DEER_FLOW_HOST_BASE_DIR)."""
import base64
import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse

import pytest

SOURCE = os.environ.get("SBX_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SBX_BUILD") or os.path.join(SOURCE, "build")
SBXD = os.path.join(BUILD, "sbxd")
SBX = os.path.join(BUILD, "sbx")
PKEY = "prov-key"

pytestmark = pytest.mark.skipif(not os.path.exists(SBXD), reason="sbxd was not built")


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)


def request(host, port, method, path, body=None, headers=None, timeout=60):
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        body = body.encode()
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        c.close()


def state_root_of(env):
    """DeerFlow's state root as sbxd (and app.py) takes it from the environment: None if none."""
    if env.get("DEER_FLOW_HOST_BASE_DIR"):
        return env["DEER_FLOW_HOST_BASE_DIR"]
    t = os.path.normpath(env.get("THREADS_HOST_PATH") or "/")
    return os.path.dirname(t) if os.path.basename(t) == "threads" else None


def deerflow_main_body(base, sandbox_id, thread_id=None, user_id=None):
    """POST /api/sandboxes's body as DeerFlow main's AioSandboxProvider sends it through
    RemoteSandboxBackend._provisioner_create (aio_sandbox_provider.py _get_extra_mounts, then
    remote_backend.py _provisioner_extra_mounts_payload): the thread's acp-workspace, the user's
    custom and integration skills views and the Lark CLI folders (config read-only, its locks and
    data writable), all below DeerFlow's state root. The folders are made first, as the gateway
    makes them (ensure_thread_dirs, the skills projection, ensure_lark_cli_credential_tree)."""
    user = user_id or "default"
    thread = thread_id or sandbox_id
    u = os.path.join(str(base), "users", user)
    lark = os.path.join(u, "integrations", "lark-cli")
    mounts = [(os.path.join(u, "threads", thread, "acp-workspace"), "/mnt/acp-workspace", True),
              (os.path.join(u, "skills_view", "custom"), "/mnt/skills/custom", True),
              (os.path.join(u, "skills_view", "integrations"), "/mnt/skills/integrations", True),
              (os.path.join(lark, "config"), "/mnt/integrations/lark-cli/config", True),
              (os.path.join(lark, "config", "locks"), "/mnt/integrations/lark-cli/config/locks", False),
              (os.path.join(lark, "data"), "/mnt/integrations/lark-cli/data", False)]
    for sub in ("workspace", "uploads", "outputs"):
        os.makedirs(os.path.join(u, "threads", thread, "user-data", sub), exist_ok=True)
    os.makedirs(os.path.join(str(base), "skills_view", "public"), exist_ok=True)
    os.makedirs(os.path.join(u, "skills_view", "legacy"), exist_ok=True)
    for h, _, _ in mounts:
        os.makedirs(h, exist_ok=True)
    for d in (lark, os.path.join(lark, "config"), os.path.join(lark, "config", "locks"),
              os.path.join(lark, "data")):
        os.chmod(d, 0o700)  # ensure_lark_cli_credential_tree: owner-only
    body = {"sandbox_id": sandbox_id, "thread_id": thread_id, "user_id": user,
            "include_legacy_skills": False, "provision_lark_cli_runtime": False,
            "provision_lark_cli_broker": False,
            "extra_mounts": [{"host_path": h, "container_path": c, "read_only": ro}
                             for h, c, ro in mounts]}
    return body


class Server:
    def __init__(self, home, env, listen="127.0.0.1:0", argv=None, cwd=None):
        self.home, self.env, self.logs = str(home), env, []
        self.state_root = state_root_of(env)
        self.ready = threading.Event()
        self.proc = subprocess.Popen(argv or [SBXD, "--listen", listen, "--home", self.home],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, cwd=cwd)
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(30):
            self.proc.kill()
            raise AssertionError("sbxd did not start: %s" % self.logs)

    def _read(self):
        for line in self.proc.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                rec = {"raw": line.decode(errors="replace")}
            self.logs.append(rec)
            if rec.get("msg") == "listening":
                self.port = int(rec["address"].rsplit(":", 1)[1])
                self.ready.set()

    def req(self, method, path, body=None, key=PKEY, headers=None, timeout=60):
        h = dict(headers or {})
        if key is not None:
            h["X-API-Key"] = key
        return request("127.0.0.1", self.port, method, path, body, h, timeout)

    def create(self, sandbox_id, thread_id=None, user_id=None, key=PKEY, **kw):
        """A create as DeerFlow main sends it (its Lark CLI mounts and the rest) when sbxd has a
        DeerFlow state root, else the bare body; extra_mounts= given replaces DeerFlow's."""
        if self.state_root and "extra_mounts" not in kw:
            body = deerflow_main_body(self.state_root, sandbox_id, thread_id, user_id)
        else:
            body = {"sandbox_id": sandbox_id}
            if thread_id is not None:
                body["thread_id"] = thread_id
            if user_id is not None:
                body["user_id"] = user_id
        body.update(kw)
        r = self.req("POST", "/api/sandboxes", body, key=key)
        assert r.status == 200, r.body
        j = r.json()
        assert set(j) == {"sandbox_id", "sandbox_url", "status"} and j["status"] == "Running", j
        return Aio(j["sandbox_url"])

    def down(self):
        """sbxd leaves its sandboxes running when it stops (for its next start): a test ends
        them itself (tests/leakcheck.py)"""
        subprocess.run([os.path.join(os.path.dirname(SBXD), "sbx"), "--home", self.home, "down"],
                       capture_output=True, timeout=120)

    def stop(self, down=False):
        if down:
            self.down()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        time.sleep(0.1)  # the reader takes the last lines
        # a sanitizer build (SBX_BUILD=build-san) reports on stderr
        raw = [l["raw"] for l in self.logs if "raw" in l]
        assert not any("Sanitizer" in l or "runtime error" in l for l in raw), "".join(raw)


class Aio:
    """A sandbox_url, driven as the agent_sandbox SDK does (base URL + v1/...)."""

    def __init__(self, url):
        self.url = url
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.prefix = u.hostname, u.port, u.path

    def req(self, method, path, body=None, timeout=60):
        return request(self.host, self.port, method, self.prefix + path, body, None, timeout)

    def ok(self, method, path, body=None, timeout=60):
        r = self.req(method, path, body, timeout)
        assert r.status == 200, (path, r.status, r.body)
        j = r.json()
        assert j["success"] is True, j
        return j["data"]

    def sh(self, command, **kw):
        return self.ok("POST", "/v1/shell/exec", dict(command=command, **kw))

    def write(self, path, content):
        return self.ok("POST", "/v1/file/write", {"file": path, "content": content})

    def read(self, path):
        return self.ok("POST", "/v1/file/read", {"file": path})["content"]


@pytest.fixture
def state(tmp_path):
    base = tmp_path / "deer-flow"
    (base / "threads").mkdir(parents=True)
    return base


@pytest.fixture
def server(tmp_path, state):
    env = dict(os.environ, PROVISIONER_API_KEY=PKEY, THREADS_HOST_PATH=str(state / "threads"),
               DEER_FLOW_HOST_BASE_DIR=str(state))
    s = Server(tmp_path / "home", env)
    yield s
    s.stop(down=True)


# ---- the provisioner API ----

def test_auth_is_app_py_s(server, tmp_path):
    for key in (None, "wrong", ""):
        for method, path in (("GET", "/api/sandboxes"), ("POST", "/api/sandboxes"),
                             ("GET", "/api/capabilities"), ("GET", "/api/nope"),
                             ("DELETE", "/api/sandboxes/x")):
            r = server.req(method, path, {"sandbox_id": "a"} if method == "POST" else None, key=key)
            assert (r.status, r.body) == (401, b"Unauthorized"), (method, path, key)
    assert server.req("GET", "/health", key=None).status == 200
    assert server.req("GET", "/api/nope").status == 404
    assert server.req("PUT", "/api/sandboxes").json() == {"detail": "Method Not Allowed"}
    # app.py: with no PROVISIONER_API_KEY configured, every /api/ route is refused
    env = dict(os.environ)
    env.pop("PROVISIONER_API_KEY", None)
    s = Server(tmp_path / "home2", env)
    try:
        assert s.req("GET", "/api/sandboxes").status == 401
        assert s.req("GET", "/api/sandboxes", key="").status == 401
    finally:
        s.stop()


def test_capabilities(server):
    r = server.req("GET", "/api/capabilities")
    assert r.status == 200
    assert r.json() == {"lark_cli_init_image": False, "lark_cli_broker_image": False}


def test_create_validation_is_pydantic_s(server):
    cases = [({}, "sandbox_id", "missing"),
             ({"sandbox_id": 5}, "sandbox_id", "string_type"),
             ({"sandbox_id": "a/b"}, "sandbox_id", "string_pattern_mismatch"),
             ({"sandbox_id": "a", "thread_id": "../x"}, "thread_id", "string_pattern_mismatch"),
             ({"sandbox_id": "a", "thread_id": "t" * 65}, "thread_id", "string_pattern_mismatch"),
             ({"sandbox_id": "a", "user_id": "u u"}, "user_id", "string_pattern_mismatch"),
             ({"sandbox_id": "a", "include_legacy_skills": "yes"}, "include_legacy_skills", "bool_type"),
             ({"sandbox_id": "a", "extra_mounts": {}}, "extra_mounts", "list_type"),
             ({"sandbox_id": "a", "extra_mounts": [{"host_path": "/x"}]}, "extra_mounts", "model_type")]
    for body, field, kind in cases:
        r = server.req("POST", "/api/sandboxes", body)
        assert r.status == 422, (body, r.body)
        d = r.json()["detail"][0]
        assert d["loc"] == ["body", field] and d["type"] == kind, (body, d)
    r = server.req("POST", "/api/sandboxes", "{not json")
    assert r.status == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    # nothing was made
    assert server.req("GET", "/api/sandboxes").json() == {"sandboxes": [], "count": 0}


def test_lifecycle_idempotent_and_shared_registry(server):
    r = server.req("GET", "/api/sandboxes/sb1")
    assert (r.status, r.json()) == (404, {"detail": "Sandbox 'sb1' not found"})
    a = server.create("sb1", "thread-1", "alice")
    again = server.req("POST", "/api/sandboxes", {"sandbox_id": "sb1", "thread_id": "thread-1",
                                                   "user_id": "alice"}).json()
    assert again["sandbox_url"] == a.url  # idempotent: the same sandbox
    got = server.req("GET", "/api/sandboxes/sb1").json()
    assert got == {"sandbox_id": "sb1", "sandbox_url": a.url, "status": "Running"}
    lst = server.req("GET", "/api/sandboxes").json()
    assert lst == {"sandboxes": [got], "count": 1}
    # the OpenSandbox API sees the same box (one registry)
    sbx_id = a.prefix.split("/")[2]
    r = request("127.0.0.1", server.port, "GET", "/v1/sandboxes/" + sbx_id)
    assert r.status == 200 and r.json()["status"]["state"] == "Running"
    r = server.req("DELETE", "/api/sandboxes/sb1")
    assert (r.status, r.json()) == (200, {"ok": True, "sandbox_id": "sb1"})
    assert server.req("GET", "/api/sandboxes/sb1").status == 404
    assert request("127.0.0.1", server.port, "GET", "/v1/sandboxes/" + sbx_id).status == 404
    assert a.req("GET", "/v1/sandbox").status == 404  # its AIO API is gone with it
    # deleting a missing sandbox is not an error (app.py ignores Kubernetes' 404s)
    r = server.req("DELETE", "/api/sandboxes/never")
    assert (r.status, r.json()) == (200, {"ok": True, "sandbox_id": "never"})


def test_mount_contract(server, state):
    (state / "skills_view" / "public" / "s1").mkdir(parents=True)
    (state / "skills_view" / "public" / "s1" / "SKILL.md").write_text("public skill\n")
    (state / "users" / "bob" / "skills_view" / "custom").mkdir(parents=True)
    (state / "users" / "bob" / "skills_view" / "custom" / "mine.md").write_text("custom\n")
    a = server.create("m1", "thr-1", "bob")
    # /mnt/user-data is the gateway's thread folder
    a.write("/mnt/user-data/outputs/report.txt", "from the sandbox\n")
    host = state / "threads" / "thr-1" / "user-data"
    assert (host / "outputs" / "report.txt").read_text() == "from the sandbox\n"
    (host / "uploads" / "in.csv").write_text("a,b\n")
    assert a.read("/mnt/user-data/uploads/in.csv") == "a,b\n"
    # skills: read-only, those that exist (DeerFlow main's gateway makes legacy, empty)
    assert a.read("/mnt/skills/public/s1/SKILL.md") == "public skill\n"
    assert a.read("/mnt/skills/custom/mine.md") == "custom\n"
    out = a.sh("touch /mnt/skills/public/x 2>&1; echo rc=$?; test -d /mnt/skills/legacy; echo legacy=$?")
    assert "Read-only file system" in out["output"] and "legacy=0" in out["output"], out
    # a user without skills folders (a bare body): none mounted
    z = server.create("m2", "thr-2", "zed", extra_mounts=[])
    out = z.sh("test -e /mnt/skills/custom; echo custom=$?; test -e /mnt/skills/legacy; echo legacy=$?")
    assert out["output"] == "custom=1\nlegacy=1\n", out
    r = a.req("POST", "/v1/file/write", {"file": "/mnt/skills/custom/new", "content": "x"})
    assert r.status >= 400 and r.json()["success"] is False


def test_extra_mounts(server, state, tmp_path):
    def bad(mounts, detail):
        r = server.req("POST", "/api/sandboxes", {"sandbox_id": "e1", "extra_mounts": mounts})
        assert (r.status, r.json()) == (400, {"detail": detail}), r.body

    ws = str(state / "acp")
    bad([{"host_path": "rel", "container_path": "/mnt/acp-workspace"}],
        "Extra mount host path must be absolute: rel")
    bad([{"host_path": str(tmp_path / "elsewhere"), "container_path": "/mnt/acp-workspace"}],
        "Extra mount host path is outside DeerFlow state: %s (it must be below "
        "DEER_FLOW_HOST_BASE_DIR=%s)" % (tmp_path / "elsewhere", state))
    bad([{"host_path": ws, "container_path": "/etc"}], "Unsupported extra mount path: /etc")
    bad([{"host_path": ws, "container_path": "/mnt/acp-workspace"},
         {"host_path": ws, "container_path": "/mnt/acp-workspace/"}],
        "Duplicate extra mount path: /mnt/acp-workspace")
    bad([{"host_path": ws, "container_path": "/mnt/acp-workspace"}] * 11,
        "Too many extra mounts; max is 10")
    # a read-only folder must exist
    bad([{"host_path": ws, "container_path": "/mnt/acp-workspace", "read_only": True}],
        "Extra mount host path is not a folder inside DeerFlow state (reached without symbolic "
        "links): %s" % ws)
    assert not os.path.exists(ws)  # a refused request changes nothing
    # nor does one whose second mount is refused: the first one's folder is not made
    bad([{"host_path": ws, "container_path": "/mnt/acp-workspace"},
         {"host_path": str(state / "nope"), "container_path": "/mnt/skills/custom", "read_only": True}],
        "Extra mount host path is not a folder inside DeerFlow state (reached without symbolic "
        "links): %s" % (state / "nope"))
    assert not os.path.exists(ws)
    a = server.create("e1", extra_mounts=[{"host_path": ws, "container_path": "/mnt/acp-workspace"}])
    a.write("/mnt/acp-workspace/f", "acp\n")
    assert open(os.path.join(ws, "f")).read() == "acp\n"
    # thread_id defaults to the sandbox id (app.py: thread_id or sandbox_id)
    assert (state / "threads" / "e1" / "user-data" / "workspace").is_dir()


def test_scope_folder_without_threads_host_path(tmp_path):
    env = dict(os.environ, PROVISIONER_API_KEY=PKEY)
    env.pop("THREADS_HOST_PATH", None)
    env.pop("DEER_FLOW_HOST_BASE_DIR", None)
    s = Server(tmp_path / "home", env)
    try:
        a = s.create("x1", "thr", "carol")
        a.write("/mnt/user-data/workspace/w.txt", "scoped\n")
        p = tmp_path / "home" / "users" / "carol" / "threads" / "thr" / "user-data" / "workspace" / "w.txt"
        assert p.read_text() == "scoped\n"
        # without DEER_FLOW_HOST_BASE_DIR (or a THREADS_HOST_PATH ending in /threads) no extra
        # mount is inside "DeerFlow state": the 400 and the log say which variable to set
        r = s.req("POST", "/api/sandboxes", {"sandbox_id": "x2", "extra_mounts": [
            {"host_path": str(tmp_path), "container_path": "/mnt/acp-workspace"}]})
        assert r.status == 400, r.body
        d = r.json()["detail"]
        assert d.startswith("Extra mount host path is outside DeerFlow state: %s (" % tmp_path), d
        assert "set DEER_FLOW_HOST_BASE_DIR" in d and "THREADS_HOST_PATH" in d, d
        logged = [l for l in s.logs if "refused" in l.get("msg", "")]
        assert logged and "set DEER_FLOW_HOST_BASE_DIR" in logged[-1]["msg"], s.logs
    finally:
        s.stop(down=True)


def test_state_root_from_threads_host_path(tmp_path, state):
    # app.py's _host_base_dir_for_extra_mounts: without DEER_FLOW_HOST_BASE_DIR the state root is
    # the parent of a THREADS_HOST_PATH that ends in /threads; DeerFlow main's whole request,
    # Lark CLI mounts included, is then taken
    env = dict(os.environ, PROVISIONER_API_KEY=PKEY, THREADS_HOST_PATH=str(state / "threads"))
    env.pop("DEER_FLOW_HOST_BASE_DIR", None)
    s = Server(tmp_path / "home", env)
    try:
        a = s.create("d1", "thr-d", "dora")
        lark = state / "users" / "dora" / "integrations" / "lark-cli"
        (lark / "config" / "config.json").write_text('{"appId": "x"}')
        assert a.read("/mnt/integrations/lark-cli/config/config.json") == '{"appId": "x"}'
        a.write("/mnt/integrations/lark-cli/data/token", "t1")
        a.write("/mnt/integrations/lark-cli/config/locks/l1", "")
        assert (lark / "data" / "token").read_text() == "t1" and (lark / "config" / "locks" / "l1").exists()
        # the config folder itself is read-only (DeerFlow's defence for the app secret)
        r = a.req("POST", "/v1/file/write", {"file": "/mnt/integrations/lark-cli/config/new", "content": "x"})
        assert r.status >= 400 and not (lark / "config" / "new").exists()
        # outside it: the 400 names the root, where it came from and what sets another
        r = s.req("POST", "/api/sandboxes", {"sandbox_id": "d2", "extra_mounts": [
            {"host_path": str(tmp_path), "container_path": "/mnt/acp-workspace"}]})
        assert r.status == 400 and r.json()["detail"] == (
            "Extra mount host path is outside DeerFlow state: %s (it must be below %s, the parent "
            "of THREADS_HOST_PATH; set DEER_FLOW_HOST_BASE_DIR for another state root)" % (tmp_path, state))
    finally:
        s.stop(down=True)
    # a THREADS_HOST_PATH not ending in /threads gives no state root (as app.py)
    env["THREADS_HOST_PATH"] = str(tmp_path / "thread-folders")
    s = Server(tmp_path / "home2", env)
    try:
        r = s.req("POST", "/api/sandboxes", deerflow_main_body(state, "d3"))
        assert r.status == 400 and "set DEER_FLOW_HOST_BASE_DIR" in r.json()["detail"], r.body
    finally:
        s.stop(down=True)


def test_extra_mount_through_a_planted_symlink(server, state, tmp_path):
    """A sandbox plants a symbolic link in its writable thread folder (under DeerFlow's state
    root) pointing at a root-owned folder outside it; a later create with an extra mount through
    the link must make nothing there, and its 400 must not tell what lies behind the link."""
    outside = tmp_path / "root-owned"
    outside.mkdir(mode=0o755)
    assert os.stat(str(outside)).st_uid == os.geteuid()
    a = server.create("plant", "t-plant")
    ws = state / "threads" / "t-plant" / "user-data" / "workspace"
    for name, target in (("evil", str(outside)), ("gone", str(tmp_path / "missing")),
                         ("file", "/etc/hostname")):
        out = a.sh("ln -s %s /mnt/user-data/workspace/%s && echo planted" % (target, name))
        assert "planted" in out["output"], out
    # positive control: the link is on the host, under the state root, and a mkdir by path (what
    # sbxd did before: sbx__mkdir_p then chmod 0777) goes through it and makes a folder outside
    assert os.path.islink(str(ws / "evil")) and os.readlink(str(ws / "evil")) == str(outside)
    os.makedirs(str(ws / "evil" / "control"))
    assert (outside / "control").is_dir()
    (outside / "control").rmdir()
    # the attack: a writable extra mount through the link
    r = server.req("POST", "/api/sandboxes", {"sandbox_id": "att", "extra_mounts": [
        {"host_path": str(ws / "evil" / "made"), "container_path": "/mnt/integrations/lark-cli/data"}]})
    assert os.listdir(str(outside)) == []  # before the fix: made/, mode 0777
    assert r.status == 400, r.body
    assert r.json() == {"detail": "Extra mount host path is not a folder inside DeerFlow state "
                                  "(reached without symbolic links): %s" % (ws / "evil" / "made")}
    assert oct(os.stat(str(outside)).st_mode & 0o7777) == "0o755"
    # the link itself as a read-only mount, and links to a folder, to nothing and to a file: one
    # answer for all (nothing about what is behind a link, or whether it is a folder)
    details = set()
    for name in ("evil", "gone", "file"):
        for ro in (True, False):
            hp = str(ws / name)
            r = server.req("POST", "/api/sandboxes", {"sandbox_id": "att", "extra_mounts": [
                {"host_path": hp, "container_path": "/mnt/acp-workspace", "read_only": ro}]})
            assert r.status == 400, r.body
            details.add(r.json()["detail"].replace(hp, "HP"))
    assert details == {"Extra mount host path is not a folder inside DeerFlow state (reached "
                       "without symbolic links): HP"}, details
    assert os.listdir(str(outside)) == [] and not os.path.exists(str(tmp_path / "missing"))
    assert server.req("GET", "/api/sandboxes").json()["count"] == 1
    # a link higher up (the thread folder's user-data replaced by the sandbox's own link is not
    # possible, but a folder of the state root made a link by anyone): refused the same way
    os.symlink(str(outside), str(state / "users-link"))
    r = server.req("POST", "/api/sandboxes", {"sandbox_id": "att", "extra_mounts": [
        {"host_path": str(state / "users-link" / "x" / "y"), "container_path": "/mnt/acp-workspace"}]})
    assert r.status == 400 and os.listdir(str(outside)) == [], r.body


def test_threads_isolated(server):
    a = server.create("iso-a", "ta")
    b = server.create("iso-b", "tb")
    a.write("/mnt/user-data/workspace/secret", "only a\n")
    r = b.req("POST", "/v1/file/read", {"file": "/mnt/user-data/workspace/secret"})
    assert r.status == 404 and r.json()["data"]["error_type"] == "not_found"
    # a sandbox's URL (its token) does not open another
    other = b.prefix.split("/")[2]
    forged = "/aio/%s/%s/v1/sandbox" % (other, a.prefix.split("/")[3])
    assert request(a.host, a.port, "GET", forged).status == 404


def test_killed_behind_the_providers_back(server):
    a = server.create("k1", "tk")
    sbx_id = a.prefix.split("/")[2]
    # deleted through the OpenSandbox API: the provisioner no longer knows it, a create makes another
    assert request("127.0.0.1", server.port, "DELETE", "/v1/sandboxes/" + sbx_id).status == 204
    assert server.req("GET", "/api/sandboxes/k1").status == 404
    b = server.create("k1", "tk")
    assert b.url != a.url and b.sh("echo alive")["output"] == "alive\n"
    # its init killed: status Failed, and a create replaces it
    out = subprocess.run([SBX, "--home", server.home, "ps", "--json"], capture_output=True,
                         text=True, check=True).stdout
    pid = [x["pid"] for x in json.loads(out)["sandboxes"] if x["id"] == b.prefix.split("/")[2]][0]
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while server.req("GET", "/api/sandboxes/k1").json()["status"] != "Failed":
        assert time.time() < deadline
        time.sleep(0.1)
    c = server.create("k1", "tk")
    assert c.url != b.url and c.sh("echo again")["output"] == "again\n"
    # destroyed behind sbxd's back (`sbx down` on its home): not found, then made anew
    subprocess.run([SBX, "--home", server.home, "down"], capture_output=True, check=True)
    assert server.req("GET", "/api/sandboxes/k1").status == 404
    assert server.req("GET", "/api/sandboxes").json()["count"] == 0
    d = server.create("k1", "tk")
    assert d.sh("echo third")["output"] == "third\n"


def test_sbxd_restart_keeps_sandboxes(tmp_path, state):
    env = dict(os.environ, PROVISIONER_API_KEY=PKEY, THREADS_HOST_PATH=str(state / "threads"))
    s = Server(tmp_path / "home", env)
    a = s.create("r1", "tr")
    a.sh("export KEEP=1; cd /tmp")
    s.stop()
    s = Server(tmp_path / "home", env)
    try:
        got = s.req("GET", "/api/sandboxes/r1").json()
        assert got["status"] == "Running"
        b = Aio(got["sandbox_url"])
        assert b.prefix == a.prefix  # the same sandbox, the same token
        assert b.sh("echo $KEEP; pwd")["output"] == "1\n/tmp\n"
    finally:
        s.stop(down=True)


# ---- the AIO API ----

def test_aio_context_and_errors(server):
    a = server.create("c1")
    j = a.req("GET", "/v1/sandbox").json()
    assert j["home_dir"] and j["version"] and set(j["detail"]) == {"system", "runtime", "utils"}
    assert a.req("GET", "/v1/nope").json() == {"detail": "Not Found"}
    assert a.req("DELETE", "/v1/sandbox").status == 405
    r = a.req("POST", "/v1/file/read", {})
    assert r.status == 422 and r.json()["detail"][0]["loc"] == ["body", "file"]
    r = a.req("POST", "/v1/shell/exec", "[]")
    assert r.status == 422
    bad = a.prefix.rsplit("/", 1)[0] + "/" + "0" * 64
    assert request(a.host, a.port, "GET", bad + "/v1/sandbox").status == 404
    assert not any("***" not in str(l.get("path", "***")) and l.get("path", "").startswith("/aio/")
                   for l in server.logs), "a token was logged"


def test_aio_shell_sessions(server):
    a = server.create("s1")
    r = a.sh("cd /tmp && export A=1 && echo one")
    assert (r["status"], r["output"], r["exit_code"]) == ("completed", "one\n", 0)
    assert a.sh("echo $A; pwd")["output"] == "1\n/tmp\n"  # one persistent shell without an id
    sid = a.ok("POST", "/v1/shell/sessions/create", {"id": "fresh", "exec_dir": "/"})["session_id"]
    assert sid == "fresh"
    assert a.sh("echo [$A]; pwd", id="fresh")["output"] == "[]\n/\n"
    assert "fresh" in a.ok("GET", "/v1/shell/sessions")["sessions"]
    assert a.sh("exit 7", id="fresh")["exit_code"] == 7
    a.ok("DELETE", "/v1/shell/sessions/fresh")
    assert a.req("POST", "/v1/shell/exec", {"command": "true", "id": "fresh"}).status == 404
    assert a.req("DELETE", "/v1/shell/sessions/fresh").status == 404
    # stderr is on the same terminal
    assert a.sh("echo out; echo err >&2")["output"] == "out\nerr\n"


def test_aio_no_change_and_hard_timeout(server):
    a = server.create("t1")
    t0 = time.time()
    r = a.sh("echo start; sleep 1; echo more; sleep 30; echo never", no_change_timeout=2)
    took = time.time() - t0
    # "more" after 1 s reset the clock: it answered 2 s of silence later, the command running on
    assert r["status"] == "no_change_timeout" and r["output"] == "start\nmore\n", r
    assert 2.8 < took < 7, took
    r = a.sh("echo 1; sleep 1.5; echo 2", no_change_timeout=1)
    assert r["status"] == "no_change_timeout" and r["output"] == "1\n", r
    time.sleep(1)
    assert a.sh("echo next")["output"] == "next\n"  # the session takes the next command
    t0 = time.time()
    r = a.sh("sleep 20; echo never", hard_timeout=1)
    assert r["status"] == "hard_timeout" and time.time() - t0 < 6, r


def test_aio_bash_exec_env(server):
    a = server.create("b1")
    r = a.ok("POST", "/v1/bash/exec", {"command": "echo $TOKEN; echo e >&2; exit 4",
                                       "env": {"TOKEN": "s3cr3t"}, "hard_timeout": 600})
    assert (r["status"], r["stdout"], r["stderr"], r["exit_code"]) == ("completed", "s3cr3t\n", "e\n", 4)
    r = a.ok("POST", "/v1/bash/exec", {"command": "echo [$TOKEN]"})
    assert r["stdout"] == "[]\n"  # never persists
    assert "s3cr3t" not in a.sh("env")["output"]
    r = a.req("POST", "/v1/bash/exec", {"command": "true", "env": {"1BAD": "x"}})
    assert r.status == 400 and r.json()["success"] is False
    r = a.ok("POST", "/v1/bash/exec", {"command": "sleep 10", "hard_timeout": 0.5})
    assert r["status"] == "timed_out" and r["exit_code"] is None


def test_aio_files_binary_safe(server):
    a = server.create("f1")
    blob = bytes(range(256)) * 40
    w = a.ok("POST", "/v1/file/write", {"file": "/mnt/user-data/outputs/b.bin",
                                        "content": base64.b64encode(blob).decode(), "encoding": "base64"})
    assert w == {"file": "/mnt/user-data/outputs/b.bin", "bytes_written": len(blob)}
    r = a.req("GET", "/v1/file/download?path=" + urllib.parse.quote("/mnt/user-data/outputs/b.bin"))
    assert r.status == 200 and r.body == blob and r.headers["content-type"] == "application/octet-stream"
    assert a.req("GET", "/v1/file/download").status == 422
    assert a.req("GET", "/v1/file/download?path=/nope").status == 404
    a.write("/mnt/user-data/workspace/t.txt", "l1\nl2\nl3\n")
    a.ok("POST", "/v1/file/write", {"file": "/mnt/user-data/workspace/t.txt", "content": "l4\n", "append": True})
    # DeerFlow's read_file(start_line=2, end_line=3) sends start_line=1, end_line=3
    r = a.ok("POST", "/v1/file/read", {"file": "/mnt/user-data/workspace/t.txt", "start_line": 1, "end_line": 3})
    assert r["content"] == "l2\nl3"
    assert a.read("/mnt/user-data/workspace/t.txt") == "l1\nl2\nl3\nl4\n"
    lst = a.ok("POST", "/v1/file/list", {"path": "/mnt/user-data", "recursive": True})
    paths = {f["path"]: f for f in lst["files"]}
    assert paths["/mnt/user-data/workspace/t.txt"]["size"] == 12
    assert paths["/mnt/user-data/outputs"]["is_directory"] is True
    assert lst["file_count"] == 2 and lst["directory_count"] == 3
    r = a.req("POST", "/v1/file/list", {"path": "/mnt/user-data/none"})
    assert r.status == 404


def test_aio_search_exact(server):
    a = server.create("g1")
    # 1,200 matching files in node_modules and 30 in src: nothing of src is crowded out
    a.sh("mkdir -p /mnt/user-data/workspace/app/node_modules/pkg /mnt/user-data/workspace/app/src && "
         "cd /mnt/user-data/workspace/app && "
         "for i in $(seq 1200); do echo 'needle dep' > node_modules/pkg/f$i.js; done && "
         "for i in $(seq 30); do echo 'needle own' > src/m$i.py; done")
    g = a.ok("POST", "/v1/file/grep", {"path": "/mnt/user-data/workspace/app", "pattern": "needle",
                                       "max_results": 200, "recursive": True})
    own = [m for m in g["matches"] if "/src/" in m["file"]]
    assert len(own) == 30 and g["truncated"] is False and g["match_count"] == len(g["matches"]), g["match_count"]
    assert all(m["line_number"] == 1 and m["line_content"] == "needle own" for m in own)
    g = a.ok("POST", "/v1/file/grep", {"path": "/mnt/user-data/workspace/app/src", "pattern": "NEEDLE",
                                       "case_insensitive": True, "max_results": 10})
    assert len(g["matches"]) == 10 and g["truncated"] is True  # a cap is always said
    f = a.ok("POST", "/v1/file/find", {"path": "/mnt/user-data/workspace/app/src", "glob": "*.py"})
    assert len(f["files"]) == 30
    f = a.ok("POST", "/v1/file/find", {"path": "/mnt/user-data/workspace/app", "glob": "**/m1*.py"})
    assert sorted(f["files"]) == sorted("/mnt/user-data/workspace/app/src/m%s.py" % i
                                        for i in [1] + list(range(10, 20)))


def test_user_data_folder_follows_no_symlink(server, state, tmp_path):
    # a thread folder that is a symbolic link (planted by whoever can write the gateway's folders)
    # is refused: sbxd never makes or mounts a folder through one
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(str(target), str(state / "threads" / "evil"))
    r = server.req("POST", "/api/sandboxes", {"sandbox_id": "sy1", "thread_id": "evil"})
    assert r.status == 500 and "symlink" in r.json()["detail"], r.body
    assert os.listdir(str(target)) == []
    assert server.req("GET", "/api/sandboxes").json()["count"] == 0


def test_aio_follow_a_command_past_no_change_timeout(server):
    a = server.create("v1")
    assert a.ok("POST", "/v1/shell/view", {})["status"] == "completed"  # nothing ran yet
    r = a.sh("echo one; sleep 2; echo two", no_change_timeout=1)
    assert r["status"] == "no_change_timeout"
    v = a.ok("POST", "/v1/shell/view", {})
    assert v["status"] == "running" and v["output"] == "one\n", v
    assert a.ok("POST", "/v1/shell/wait", {"seconds": 10})["status"] == "completed"
    v = a.ok("POST", "/v1/shell/view", {})
    assert (v["status"], v["output"], v["exit_code"]) == ("completed", "one\ntwo\n", 0), v
    # kill: a command that would run for a minute ends at once
    a.ok("POST", "/v1/shell/sessions/create", {"id": "k"})
    r = a.sh("echo start; sleep 60", id="k", no_change_timeout=1)
    assert r["status"] == "no_change_timeout"
    assert a.ok("POST", "/v1/shell/wait", {"id": "k", "seconds": 1})["status"] == "running"
    t0 = time.time()
    k = a.ok("POST", "/v1/shell/kill", {"id": "k"})
    assert k["status"] == "terminated" and time.time() - t0 < 5, k
    assert a.ok("POST", "/v1/shell/view", {"id": "k"})["status"] != "running"
    assert a.req("POST", "/v1/shell/view", {"id": "nope"}).status == 404


def _quick_start_block():
    text = open(os.path.join(SOURCE, "docs", "deerflow.md")).read()
    at = text.index("<!-- quick-start:")
    start = text.index("```sh\n", at) + len("```sh\n")
    return text[start:text.index("```", start)]


def _sbxd_below(pid):
    """The sbxd a shell started: the shell itself once it has exec'd, else its child."""
    for _ in range(300):
        if os.path.basename(os.readlink("/proc/%d/exe" % pid)) == "sbxd":
            return pid
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(k) for k in f.read().split()]
        for k in kids:
            try:
                if os.path.basename(os.readlink("/proc/%d/exe" % k)) == "sbxd":
                    return k
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError("no sbxd below the quick start's shell")


def test_docs_quick_start(tmp_path):
    """docs/deerflow.md's quick start, its shell block run as written (in a folder whose ./build
    is this build, with HOME in the test's folder; only the port is changed, to a free one, and
    the state folder, by SBX_HOME: root's default, /var/lib/sbx, is the host's own), then
    a create exactly as DeerFlow main's AioSandboxProvider sends it, its Lark CLI mounts
    included, with the key the block made."""
    qs = tmp_path / "qs"
    qs.mkdir()
    os.symlink(BUILD, str(qs / "build"))
    block = _quick_start_block()
    assert "127.0.0.1:8080" in block and "./build/sbxd" in block, block
    port = Server(tmp_path / "probe", dict(os.environ, PROVISIONER_API_KEY=PKEY))
    free = port.port
    port.stop()
    script = block.replace("127.0.0.1:8080", "127.0.0.1:%d" % free)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PROVISIONER_API_KEY", "DEER_FLOW_HOME", "DEER_FLOW_HOST_BASE_DIR",
                        "THREADS_HOST_PATH", "SBX_HOME")}
    env["HOME"] = str(tmp_path)
    env["SBX_HOME"] = str(qs / ".sbx")
    s = Server(qs / ".sbx", env, argv=["sh", "-c", script], cwd=str(qs))
    sbxd = _sbxd_below(s.proc.pid)
    try:
        with open("/proc/%d/environ" % sbxd, "rb") as f:
            senv = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        key = senv[b"PROVISIONER_API_KEY"].decode()
        home = str(tmp_path / "deer-flow" / "backend" / ".deer-flow")
        assert senv[b"DEER_FLOW_HOST_BASE_DIR"].decode() == home
        # the gateway (DeerFlow main, DEER_FLOW_HOME from the same shell) makes its folders and
        # asks; every mount of its request lies below its state folder
        s.state_root = home
        body = deerflow_main_body(home, "qs-sandbox", "qs-thread", "default")
        assert {m["container_path"] for m in body["extra_mounts"]} >= {
            "/mnt/integrations/lark-cli/config", "/mnt/integrations/lark-cli/config/locks",
            "/mnt/integrations/lark-cli/data"}
        assert s.req("POST", "/api/sandboxes", body, key=None).status == 401
        a = s.create("qs-sandbox", "qs-thread", "default", key=key)
        assert a.sh("echo ready")["output"] == "ready\n"
        a.write("/mnt/integrations/lark-cli/data/token", "t")
        lark = os.path.join(home, "users", "default", "integrations", "lark-cli")
        assert open(os.path.join(lark, "data", "token")).read() == "t"
        out = a.sh("ls -d /mnt/acp-workspace /mnt/skills/custom /mnt/integrations/lark-cli/config/locks")
        assert out["exit_code"] == 0, out
        # the sandbox is in the home the block's sbxd uses
        assert os.listdir(str(qs / ".sbx" / "sandboxes"))
    finally:
        if sbxd != s.proc.pid:
            os.kill(sbxd, signal.SIGTERM)
        s.stop()
        subprocess.run([SBX, "--home", str(qs / ".sbx"), "down"], capture_output=True)
