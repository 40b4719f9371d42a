"""The opensandbox backend (issue 5) against a real sbxd on 127.0.0.1, with a fault-injecting
proxy where a remote deployment's failures are needed. The shared contract suite (conformance)
runs the same operations on the linux and opensandbox backends and expects the same answers."""
import json
import os
import signal
import subprocess
import time
import unicodedata
import urllib.request

import pytest

from conftest import BUILD, Sbx, free_port
from faultproxy import FaultProxy

SBXD = os.path.join(BUILD, "sbxd")
KEY = "osb-test-key-8c1f"
WS = "/mnt/user-data/workspace"
OUT = "/mnt/user-data/outputs"

pytestmark = pytest.mark.skipif(not os.path.exists(SBXD), reason="build/sbxd is not built")


class Sbxd:
    def __init__(self, home):
        self.home = str(home)
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.log = open(os.path.join(self.home + ".log"), "ab")
        self.proc = subprocess.Popen([SBXD, "--listen", "127.0.0.1:%d" % self.port, "--home",
                                      self.home, "--api-key", KEY],
                                     stdout=self.log, stderr=self.log)
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sbxd did not start")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def api(self, method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d/v1%s" % (self.port, path), method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"OPEN-SANDBOX-API-KEY": KEY,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def sandboxes(self):
        status, body = self.api("GET", "/sandboxes?pageSize=200")
        assert status == 200, body
        return body["items"]


@pytest.fixture
def sbxd(tmp_path):
    d = Sbxd(tmp_path / "sbxd-home")
    yield d
    d.stop()
    subprocess.run([os.path.join(BUILD, "sbx"), "--home", d.home, "down"], capture_output=True)


def osb_config(tmp_path, port, extra=""):
    p = tmp_path / ("osb-%d.yaml" % port)
    p.write_text("sandbox:\n  use: opensandbox\n  domain: 127.0.0.1:%d\n  api_key: %s\n"
                 "  image: host\n%s" % (port, KEY, extra))
    return str(p)


@pytest.fixture
def osb(sbxd, tmp_path, make_sbx):
    return make_sbx(config=osb_config(tmp_path, sbxd.port))


@pytest.fixture
def proxied(sbxd, tmp_path, make_sbx):
    proxy = FaultProxy(sbxd.port)
    s = make_sbx(config=osb_config(tmp_path, proxy.port))
    s.proxy = proxy
    yield s
    proxy.close()


def remote_id(s, thread="t"):
    meta = os.path.join(s.home, "sandboxes")
    for d in os.listdir(meta):
        with open(os.path.join(meta, d, "meta")) as f:
            m = json.load(f)
        if m.get("thread") == thread:
            return m["remote_id"]
    return None


# ---- configuration --------------------------------------------------------------------------

def test_config_keys_and_defaults(make_sbx, tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("sandbox:\n  use: opensandbox\n  api_key: s3cr3t-k3y-value\n")
    out = make_sbx(config=str(p)).ok("config", "show")
    for want in ('use: "opensandbox"', 'image: "python:3.11"', "request_timeout: 30",
                 "ready_timeout: 30", "use_server_proxy: false", "sandbox_timeout: 14400",
                 "bash_command_timeout: 600", "replicas: 3", "idle_timeout: 600"):
        assert want in out, want
    assert "s3cr3t-k3y-value" not in out


def test_api_key_from_environment_and_never_printed(sbxd, tmp_path, make_sbx):
    p = tmp_path / "c.yaml"
    p.write_text("sandbox:\n  use: opensandbox\n  image: host\n")
    s = make_sbx(config=str(p))
    env = {"OPEN_SANDBOX_API_KEY": KEY, "OPEN_SANDBOX_DOMAIN": "127.0.0.1:%d" % sbxd.port}
    r = s.run("exec", "-t", "t", "--json", "--", "echo ok", env=env, check=0)
    assert json.loads(r.stdout)["stdout"] == "ok\n"
    # a wrong key fails with a clear error that does not print the key
    bad = s.run("exec", "-t", "t2", "--", "true",
                env=dict(env, OPEN_SANDBOX_API_KEY="wrong-key-123456"))
    assert bad.returncode == 1 and b"wrong-key-123456" not in bad.stderr
    for root, _, files in os.walk(s.home):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                assert KEY.encode() not in fh.read(), os.path.join(root, f)


# ---- create, bootstrap, renewal -------------------------------------------------------------

def test_create_bootstraps_user_data(osb, sbxd):
    r = osb.sh("t", "ls -d /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs; pwd")
    assert r["stdout"] == ("/mnt/user-data/outputs\n/mnt/user-data/uploads\n"
                           "/mnt/user-data/workspace\n/mnt/user-data/workspace\n")
    items = sbxd.sandboxes()
    assert len(items) == 1 and items[0]["metadata"]["sbx_thread"] == "t"


def test_bootstrap_failure_destroys_the_remote(proxied, sbxd):
    proxied.proxy.add("POST", r"/command$", ("terminal", {
        "type": "error", "error": {"ename": "CommandExecError", "evalue": "1",
                                   "traceback": ["exit status 1"]}}), times=1)
    p = proxied.run("exec", "-t", "t", "--", "true")
    assert p.returncode == 1 and b"OpenSandbox bootstrap failed" in p.stderr
    assert sbxd.sandboxes() == []


def test_renewal_covers_command_timeout(osb, sbxd):
    from datetime import datetime

    def expires():
        status, info = sbxd.api("GET", "/sandboxes/" + remote_id(osb))
        return datetime.fromisoformat(info["expiresAt"].replace("Z", "+00:00")).timestamp()

    osb.sh("t", "true")
    assert abs(expires() - (time.time() + 14400)) < 60  # renewed to sandbox_timeout
    # a long command moves the horizon past its own timeout while it runs, and a short
    # operation meanwhile (serialised behind it) cannot cut it back
    long = subprocess.Popen(osb.cmd("exec", "-t", "t", "--timeout", "30000", "--", "sleep 3"))
    time.sleep(1.5)
    short = subprocess.Popen(osb.cmd("read", "-t", "t", "/etc/hostname"), stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    assert expires() >= time.time() + 30000
    long.wait(timeout=60)
    short.wait(timeout=60)


def test_sandbox_timeout_zero_creates_without_expiry(sbxd, tmp_path, make_sbx):
    s = make_sbx(config=osb_config(tmp_path, sbxd.port, "  sandbox_timeout: 0\n"))
    s.sh("t", "true")
    status, info = sbxd.api("GET", "/sandboxes/" + remote_id(s))
    assert "expiresAt" not in info


# ---- commands -------------------------------------------------------------------------------

def test_exec_env_timeout_and_exit_codes(osb):
    p = osb.run("exec", "-t", "t", "-e", "FOO=bar", "--json", "--", 'echo "$FOO"; echo e >&2; exit 3')
    r = json.loads(p.stdout)
    assert r["stdout"] == "bar\n" and r["stderr"] == "e\n" and r["exit_code"] == 3
    assert r["output"] == "bar\n\nStd Error:\ne\n\nExit Code: 3"
    assert osb.sh("t", "true")["output"] == "(no output)"


def test_deadline_exceeded_is_124_with_partial_output(proxied):
    proxied.sh("t", "true")
    # skip=1: the reclaim health check passes, the command's stream ends in a deadline
    proxied.proxy.add("POST", r"/command$", ("terminal", {
        "type": "error", "error": {"ename": "CommandExecError",
                                   "evalue": "context deadline exceeded", "traceback": []}}),
        times=1, skip=1)
    r = proxied.sh("t", "echo partial")
    assert r["timed_out"] is True and r["exit_code"] == 124
    assert r["output"] == "partial\n\nError: command timed out\nExit Code: 124"


def test_real_timeout_through_sbxd_is_124(osb):
    p = osb.run("exec", "-t", "t", "--timeout", "1", "--json", "--", "echo start; sleep 30")
    r = json.loads(p.stdout)
    assert p.returncode == 124 and r["timed_out"] is True and r["exit_code"] == 124
    assert r["output"] == "start\n\nError: command timed out\nExit Code: 124"


def test_signal_exit_keeps_its_code(proxied):
    proxied.sh("t", "true")
    proxied.proxy.add("POST", r"/command$", ("terminal", {
        "type": "error", "error": {"ename": "CommandExecError", "evalue": "-1",
                                   "traceback": ["signal: killed"]}}), times=1, skip=1)
    r = proxied.sh("t", "echo x")
    assert r["exit_code"] == -1 and r["timed_out"] is False
    assert r["output"] == "x\n\nExit Code: -1"


# ---- eviction -------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [404, 410])
def test_command_path_gone_evicts(proxied, sbxd, status):
    proxied.sh("t", "true")
    first = remote_id(proxied)
    proxied.proxy.add("POST", r"/command$", ("status", status), times=2)
    p = proxied.run("exec", "-t", "t", "--", "true")
    assert p.returncode == 1
    r = proxied.sh("t", "echo again")
    assert r["stdout"] == "again\n"
    assert remote_id(proxied) != first


def test_file_path_404_is_not_found_and_keeps_the_remote(osb):
    osb.sh("t", "true")
    first = remote_id(osb)
    p = osb.run("read", "-t", "t", WS + "/missing.txt")
    assert p.returncode == 1 and b"not found" in p.stderr.lower()
    assert remote_id(osb) == first


def test_sbxd_killed_mid_command(sbxd, osb):
    osb.sh("t", "true")
    first = remote_id(osb)
    proc = subprocess.Popen(osb.cmd("exec", "-t", "t", "--", "sleep 30"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)
    sbxd.kill()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and err
    sbxd.start()
    r = osb.sh("t", "echo back")
    assert r["stdout"] == "back\n" and remote_id(osb) != first


# ---- files and the shared contract suite ------------------------------------------------------

TREE = ("mkdir -p src/b node_modules/m g/sub build/ws && "
        "printf 'Hello world\\nbye\\nHELLO again\\n' > g/a.txt && printf 'hello\\n' > g/sub/b.md && "
        "printf 'hello\\0bin\\377' > g/bin.dat && touch src/a.py src/b/c.py x.py node_modules/m/z.py "
        "build/ws/k.py && python3 -c \"open('g/long.txt','w').write('x'*250+'\\n')\"")

CASES = [
    ("ls", WS, "--depth", "2", "--json"),
    ("ls", WS + "/g", "--depth", "1", "--json"),
    ("ls", WS + "/nope", "--json"),
    ("glob", WS, "**/*.py", "--json"),
    ("glob", WS, "src/*.py", "--json"),
    ("glob", WS, "*", "--include-dirs", "--json"),
    ("glob", WS, "*.py", "--max", "2", "--json"),
    ("glob", WS + "/build/ws", "*.py", "--json"),
    ("grep", WS + "/g", "hello", "--json"),
    ("grep", WS + "/g", "hello", "--case-sensitive", "--json"),
    ("grep", WS + "/g", "b.e", "--fixed", "--json"),
    ("grep", WS + "/g/a.txt", "b.e", "--json"),
    ("grep", WS + "/g", "x+", "--json"),
    ("grep", WS + "/g", "hello", "--max", "1", "--json"),
    ("grep", WS + "/g", "(bad", "--json"),
    ("read", WS + "/g/a.txt", "--start", "2", "--end", "3"),
    ("read", WS + "/g/a.txt", "--start", "-5", "--end", "1"),
    ("read", WS + "/g/bin.dat"),
]


def answers(s, env=None):
    s.sh("t", TREE)
    out = []
    for c in CASES:
        p = s.run(c[0], "-t", "t", *c[1:], env=env)
        out.append((p.returncode, p.stdout.decode(), p.returncode != 0))
    return out


@pytest.mark.parametrize("remote_search", ["1", "0"])
def test_conformance_same_answers_as_linux(osb, make_sbx, remote_search):
    # "1": the native search runs inside the remote; "0": the fallback over a listing
    linux = make_sbx()
    a = answers(linux)
    b = answers(osb, env={"SBX_OPENSANDBOX_REMOTE_SEARCH": remote_search})
    for case, x, y in zip(CASES, a, b):
        assert x[:2] == y[:2], case
    # and the answers are the contract's, not merely equal
    assert json.loads(b[3][1]) == {"matches": [WS + "/x.py", WS + "/src/a.py", WS + "/src/b/c.py"],
                                   "truncated": False}
    assert json.loads(b[7][1])["matches"] == [WS + "/build/ws/k.py"]
    assert b[2][0] == 1 and b[14][0] == 1 and b[17][0] == 1


@pytest.mark.parametrize("remote_search", ["1", "0"])
def test_grep_backtracking_ends_by_its_deadline(osb, remote_search):
    # a back-reference regex over one 300-byte line never ends by itself: both the helper inside
    # the remote (its deadline in SBX_SEARCH_TIMEOUT_MS) and the local fallback stop at the
    # deadline (--timeout here; 30 s when none is given) and answer truncated
    osb.sh("t", "mkdir -p %s && printf '%%s\\n' x%s > %s/evil.txt" % (WS, "a" * 300, WS))
    p = osb.run("grep", "-t", "t", WS, r"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x", "--timeout", "2",
                "--json", env={"SBX_OPENSANDBOX_REMOTE_SEARCH": remote_search}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"matches": [], "truncated": True}


def test_files_binary_roundtrip_and_append(osb):
    data = bytes(range(256)) * 300
    osb.run("upload", "-t", "t", OUT + "/nested/deep/bin.dat", input=data, check=0)
    assert osb.run("download", "-t", "t", OUT + "/nested/deep/bin.dat", check=0).stdout == data
    osb.run("write", "-t", "t", WS + "/log.txt", "--append", input=b"one\n", check=0)
    osb.run("write", "-t", "t", WS + "/log.txt", "--append", input=b"two\n", check=0)
    assert osb.ok("read", "-t", "t", WS + "/log.txt") == "one\ntwo\n"
    p = osb.run("download", "-t", "t", "/etc/hostname")
    assert p.returncode == 1 and b"must be under '/mnt/user-data'" in p.stderr


def test_download_cap(osb):
    osb.sh("t", "truncate -s 104857601 " + OUT + "/big")
    p = osb.run("download", "-t", "t", OUT + "/big")
    assert p.returncode == 1 and b"File exceeds maximum download size of 104857600 bytes" in p.stderr


# ---- output synchronisation -----------------------------------------------------------------

def host_outputs(s, thread="t"):
    return os.path.join(s.home, "users", "default", "threads", thread, "user-data", "outputs")


def synced(s, thread="t"):
    root = host_outputs(s, thread)
    got = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                got[os.path.relpath(p, root)] = fh.read()
    return got


def test_sync_copies_outputs_on_release(osb):
    osb.sh("t", "mkdir -p %s/a/b && printf 'report' > %s/r.txt && head -c 70000 /dev/urandom > "
                "%s/a/b/blob.bin && echo ws > %s/not-synced.txt" % (OUT, OUT, OUT, WS))
    got = synced(osb)
    assert got["r.txt"] == b"report"
    assert len(got["a/b/blob.bin"]) == 70000
    remote_blob = osb.run("download", "-t", "t", OUT + "/a/b/blob.bin", check=0).stdout
    assert got["a/b/blob.bin"] == remote_blob
    assert "not-synced.txt" not in got
    # remote deletions are not propagated; changes are
    osb.sh("t", "rm %s/r.txt; printf v2 > %s/a/b/blob.bin" % (OUT, OUT))
    got = synced(osb)
    assert got["r.txt"] == b"report" and got["a/b/blob.bin"] == b"v2"


def test_sync_skips_hostile_names(osb):
    nfc = unicodedata.normalize("NFC", "caf\u00e9")
    nfd = unicodedata.normalize("NFD", "caf\u00e9")
    cmd = ("cd %s && mkdir -p ok Dup dup && printf x > ok/fine.txt && printf 1 > Dup/a && "
           "printf 2 > dup/b && printf c > 'con.txt' && printf c > 'trail.' && "
           "printf c > 'sp ' && printf c > 'a:b' && printf c > 'back\\slash' && "
           "printf n > '%s' && printf d > '%s' && ln -s /etc/passwd link && "
           "mkdir real && ln -s real linkdir && printf y > real/in.txt" % (OUT, nfc, nfd))
    osb.sh("t", cmd)
    got = synced(osb)
    assert got.get("ok/fine.txt") == b"x"
    assert got.get("real/in.txt") == b"y"
    for bad in ("con.txt", "trail.", "sp ", "a:b", "back\\slash", "link", "Dup/a", "dup/b",
                nfc, nfd):
        assert bad not in got, bad
    assert not any(k.startswith("linkdir") for k in got)


def test_sync_refuses_linked_local_destination(osb, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    osb.sh("t", "mkdir -p %s/d && printf x > %s/d/f" % (OUT, OUT))
    outputs = host_outputs(osb)
    import shutil
    shutil.rmtree(os.path.join(outputs, "d"))
    os.symlink(str(victim), os.path.join(outputs, "d"))
    osb.sh("t", "printf y > %s/d/f" % OUT)
    assert os.listdir(victim) == []


def test_sync_alias_of_local_file_is_skipped(osb):
    osb.sh("t", "true")
    outputs = host_outputs(osb)
    with open(os.path.join(outputs, "Report.txt"), "w") as f:
        f.write("local")
    osb.sh("t", "printf remote > %s/report.txt" % OUT)
    assert "report.txt" not in synced(osb)
    with open(os.path.join(outputs, "Report.txt")) as f:
        assert f.read() == "local"


def test_sync_listing_over_cap_skips_the_pass(osb):
    osb.sh("t", "cd %s && for i in $(seq 1 4000); do : > file-with-a-longish-name-$i.txt; done" % OUT,
           timeout=180)
    assert synced(osb) == {}


def test_sync_slow_download_stops_at_deadline(proxied):
    proxied.sh("t", "head -c 3000000 /dev/zero > %s/slow.bin && printf ok > %s/a.txt" % (OUT, OUT))
    # the first pass copied both; now make downloads crawl and the deadline short
    proxied.proxy.add("GET", r"/files/download", ("throttle", 100000))
    start = time.time()
    p = proxied.run("exec", "-t", "t", "--", "printf new > %s/a.txt" % OUT,
                    env={"SBX_OUTPUT_SYNC_DEADLINE": "2"}, timeout=120)
    assert p.returncode == 0 and time.time() - start < 30
    assert b"output sync truncated (time budget" in p.stderr


def test_next_acquire_waits_for_the_copy(proxied):
    proxied.sh("t", "head -c 2000000 /dev/zero > %s/big.bin" % OUT)
    proxied.proxy.add("GET", r"/files/download", ("throttle", 1000000))
    first = subprocess.Popen(proxied.cmd("exec", "-t", "t", "--", "true"))
    time.sleep(0.5)
    start = time.time()
    r = proxied.sh("t", "echo second")
    first.wait(timeout=60)
    assert r["stdout"] == "second\n"
    assert time.time() - start > 1.0  # it waited for the first release's copy


# ---- reset and shutdown ---------------------------------------------------------------------

def test_down_destroys_the_remotes(osb, sbxd):
    osb.sh("a", "true")
    osb.sh("b", "true")
    assert len(sbxd.sandboxes()) == 2
    osb.ok("down")
    assert sbxd.sandboxes() == []
