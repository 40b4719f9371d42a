"""DeerFlow's default provider on sbx, driven by the real clients:

- the agent_sandbox Python SDK (agent-infra/sandbox's sdk/python, Fern-generated) against the
  sandbox_url sbxd's provisioner API hands out, with exactly the calls DeerFlow's AioSandbox
  (deerflow/community/aio_sandbox/aio_sandbox.py) makes; needs SBX_AGENT_SANDBOX_SRC (a checkout
  of sdk/python) and httpx + pydantic (Debian: python3-httpx, python3-pydantic);
- DeerFlow's own RemoteSandboxBackend, wait_for_sandbox_ready and AioSandbox
  (tests/integration/deerflow_aio_backend_driver.py), and its whole AioSandboxProvider
  (deerflow_aio_driver.py, with stand-ins for the LLM libraries its module imports):
  SBX_DEERFLOW_SRC, a checkout of bytedance/deer-flow, and SBX_DEERFLOW_PYTHON, a Python >= 3.12
  with pydantic 2, which Debian 12 cannot provide: tests/deerflow-python.sh (after its --setup)
  is one, a Debian trixie root.

Neither source can be fetched in CI (no PyPI, no GitHub): each test is skipped, with the reason,
when its sources are not given. Checkouts from the mirrors:
  git --git-dir=.../agent-infra+sandbox/repo archive HEAD sdk/python | tar -x -C /tmp/asdk
  git --git-dir=.../bytedance+deer-flow/repo archive HEAD backend | tar -x -C /tmp/deerflow"""
import base64
import importlib
import os
import subprocess
import sys
import time

import pytest

import json
import signal

from conftest import free_port
from test_provisioner import PKEY, SBX, SBXD, Server

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_SRC = os.environ.get("SBX_AGENT_SANDBOX_SRC")
DF_SRC = os.environ.get("SBX_DEERFLOW_SRC")
DF_PY = os.environ.get("SBX_DEERFLOW_PYTHON")


def _sdk():
    if not SDK_SRC:
        pytest.skip("SBX_AGENT_SANDBOX_SRC is not set (a checkout of agent-infra/sandbox's sdk/python)")
    for m in ("httpx", "pydantic"):
        if importlib.util.find_spec(m) is None:
            pytest.skip("the agent_sandbox SDK needs %s (Debian: python3-%s)" % (m, m))
    if SDK_SRC not in sys.path:
        sys.path.insert(0, SDK_SRC)
    import agent_sandbox  # noqa: F401
    from agent_sandbox import Sandbox
    from agent_sandbox.core.api_error import ApiError
    return Sandbox, ApiError


@pytest.fixture
def env(tmp_path):
    base = tmp_path / "deer-flow"
    (base / "threads").mkdir(parents=True)
    return dict(os.environ, PROVISIONER_API_KEY=PKEY, THREADS_HOST_PATH=str(base / "threads"),
                DEER_FLOW_HOST_BASE_DIR=str(base))


pytestmark = pytest.mark.skipif(not os.path.exists(SBXD), reason="sbxd was not built")


def test_agent_sandbox_sdk_as_deerflow_calls_it(tmp_path, env):
    Sandbox, ApiError = _sdk()
    s = Server(tmp_path / "home", env)
    try:
        url = s.create("sdk1", "thread-sdk", "alice").url
        c = Sandbox(base_url=url, timeout=600)
        # AioSandbox.home_dir
        assert c.sandbox.get_context().home_dir
        # execute_command: the persistent shell, no_change_timeout=600
        r = c.shell.exec_command(command="cd /tmp && export X=42 && echo hi", no_change_timeout=600)
        assert r.data.output == "hi\n" and r.data.exit_code == 0
        assert c.shell.exec_command(command="echo $X; pwd", no_change_timeout=600).data.output == "42\n/tmp\n"
        # the recovery path: an explicit session, used by id, then cleaned up
        c.shell.create_session(id="fresh-1")
        assert c.shell.exec_command(command="echo [$X]", id="fresh-1", no_change_timeout=600).data.output == "[]\n"
        c.shell.cleanup_session("fresh-1")
        with pytest.raises(ApiError) as e:
            c.shell.exec_command(command="true", id="fresh-1")
        assert e.value.status_code == 404
        # execute_command with env: bash.exec, stdout and stderr apart, nothing persists
        b = c.bash.exec(command="echo $API_TOKEN; echo warn >&2", env={"API_TOKEN": "t0k"}, hard_timeout=600.0)
        assert (b.data.stdout, b.data.stderr, b.data.exit_code) == ("t0k\n", "warn\n", 0)
        assert c.bash.exec(command="echo [$API_TOKEN]").data.stdout == "[]\n"
        # write_file / read_file (start_line - 1, end_line) / update_file (base64) / download_file
        c.file.write_file(file="/mnt/user-data/workspace/a.txt", content="1\n2\n3\n4\n")
        assert c.file.read_file(file="/mnt/user-data/workspace/a.txt", start_line=1, end_line=3).data.content == "2\n3"
        blob = bytes(range(256)) * 8
        c.file.write_file(file="/mnt/user-data/outputs/b.bin", content=base64.b64encode(blob).decode(),
                          encoding="base64")
        assert b"".join(c.file.download_file(path="/mnt/user-data/outputs/b.bin")) == blob
        with pytest.raises(ApiError) as e:
            c.file.read_file(file="/mnt/user-data/none")
        assert e.value.status_code == 404
        # glob: find_files, and list_path for include_dirs
        c.shell.exec_command(command="mkdir -p /mnt/user-data/workspace/p/node_modules/m "
                             "/mnt/user-data/workspace/p/src && cd /mnt/user-data/workspace/p && "
                             "for i in $(seq 1200); do echo 'TODO dep' > node_modules/m/f$i.js; done && "
                             "for i in $(seq 12); do echo 'TODO mine' > src/s$i.py; done")
        found = c.file.find_files(path="/mnt/user-data/workspace/p/src", glob="*.py").data.files
        assert len(found) == 12
        entries = c.file.list_path(path="/mnt/user-data/workspace", recursive=True, show_hidden=False).data.files
        assert any(e.path == "/mnt/user-data/workspace/p/src" and e.is_directory for e in entries)
        # grep as AioSandbox.grep sends it (max_results = max(100 * 4, 150))
        g = c.file.grep_files(path="/mnt/user-data/workspace/p", pattern="todo", case_insensitive=True,
                              fixed_strings=False, max_results=400, max_file_size="1M", recursive=True).data
        mine = [m for m in g.matches if "/src/" in m.file]
        assert len(mine) == 12 and not g.truncated
    finally:
        s.stop()


def _deerflow_python():
    if not DF_SRC:
        pytest.skip("SBX_DEERFLOW_SRC is not set (a checkout of bytedance/deer-flow)")
    if not SDK_SRC:
        pytest.skip("SBX_AGENT_SANDBOX_SRC is not set (DeerFlow's AioSandbox imports agent_sandbox)")
    py = DF_PY or sys.executable
    probe = subprocess.run([py, "-c", "import sys; assert sys.version_info >= (3, 12); "
                            "import pydantic, httpx, requests, yaml, sqlalchemy, redis; "
                            "assert pydantic.VERSION[0] == '2'"],
                           capture_output=True, text=True, env=_binds(os.environ))
    if probe.returncode != 0:
        pytest.skip("DeerFlow needs Python >= 3.12 with pydantic 2, httpx, requests, pyyaml, "
                    "sqlalchemy and redis "
                    "(SBX_DEERFLOW_PYTHON=tests/deerflow-python.sh after its --setup): %s"
                    % probe.stderr.strip().splitlines()[-1:])
    return py


def _binds(env, *more):
    """What tests/deerflow-python.sh binds into its root: the sources and this test's files."""
    return dict(env, SBX_DEERFLOW_BINDS=":".join([HERE, DF_SRC or "", SDK_SRC or ""] + [str(m) for m in more]))


def test_deerflow_remote_backend_and_aio_sandbox(tmp_path, env):
    """DeerFlow's RemoteSandboxBackend, wait_for_sandbox_ready and AioSandbox, its real files,
    through create, the contract, isolation, vanish and recreate, and an sbxd restart."""
    py = _deerflow_python()
    listen = "127.0.0.1:%d" % free_port()
    state = tmp_path / "driver-state.json"
    denv = _binds(dict(env, PYTHONPATH=os.pathsep.join([
        os.path.join(DF_SRC, "backend", "packages", "harness"),
        os.path.join(DF_SRC, "backend", "packages", "extension-api"), SDK_SRC]),
        SBX_PROVISIONER_URL="http://" + listen, SBX_PROVISIONER_KEY=PKEY,
        SBX_DEERFLOW_HARNESS=os.path.join(DF_SRC, "backend", "packages", "harness"),
        # the gateway and sbxd on one host: DeerFlow's state root is the one sbxd mounts from
        DEER_FLOW_HOME=env["DEER_FLOW_HOST_BASE_DIR"]), tmp_path)
    driver = os.path.join(HERE, "deerflow_aio_backend_driver.py")
    out = []
    for phase in ("create", "adopt"):
        s = Server(tmp_path / "home", env, listen)
        try:
            r = subprocess.run([py, driver, phase, str(state)], env=denv, capture_output=True,
                               text=True, timeout=300)
            out.append(r.stdout)
            assert r.returncode == 0 and "DRIVER OK" in r.stdout, r.stdout + r.stderr
        finally:
            s.stop()  # the restart between the phases: sandboxes stay, sbxd goes
        if phase == "create":
            # thread-b's sandbox killed behind everyone's back while sbxd is down
            sb = json.loads(state.read_text())["b_sbx"]
            ps = json.loads(subprocess.run([SBX, "--home", s.home, "ps", "--json"], capture_output=True,
                                           text=True, check=True).stdout)["sandboxes"]
            os.kill([x["pid"] for x in ps if x["id"] == sb][0], signal.SIGKILL)
    print("".join(out))


def test_deerflow_aio_provider(tmp_path, env):
    """DeerFlow's whole AioSandboxProvider (deerflow_aio_driver.py): the contract, warm pool and
    release, replicas eviction, idle release, a sandbox removed and one killed behind its back,
    sbxd restarted under it, and its ownership leases (memory, and redis between two gateway
    processes). Its module imports langchain, langgraph and langchain_openai, which no reachable
    registry has: deerflow_llm_placeholders.py stands in for them, and fails if called."""
    py = _deerflow_python()
    listen = "127.0.0.1:%d" % free_port()
    work = tmp_path / "driver"
    work.mkdir()
    harness = os.path.join(DF_SRC, "backend", "packages", "harness")
    extapi = os.path.join(DF_SRC, "backend", "packages", "extension-api")
    denv = _binds(dict(env, PYTHONPATH=os.pathsep.join([harness, extapi, SDK_SRC]),
                       SBX_PROVISIONER_URL="http://" + listen, SBX_PROVISIONER_KEY=PKEY,
                       SBX_DRIVER_DIR=str(work),
                       # the gateway and sbxd on one host: DeerFlow's state root is the one sbxd
                       # mounts from
                       DEER_FLOW_HOME=env["DEER_FLOW_HOST_BASE_DIR"]), tmp_path)
    s = Server(tmp_path / "home", env, listen)
    t0 = time.time()
    d = subprocess.Popen([py, os.path.join(HERE, "deerflow_aio_driver.py"), "main"], env=denv,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, asked = [], 0
    try:
        for line in d.stdout:
            out.append(line)
            if not line.startswith("ASK "):
                continue
            what = line.split()[1:]
            if what[0] == "restart":
                s.stop()
                s = Server(tmp_path / "home", env, listen)
            elif what[0] == "kill":
                ps = json.loads(subprocess.run([SBX, "--home", s.home, "ps", "--json"], capture_output=True,
                                               text=True, check=True).stdout)["sandboxes"]
                os.kill([x["pid"] for x in ps if x["id"] == what[1]][0], signal.SIGKILL)
            asked += 1
            (work / ("answer-%d" % asked)).write_text("done")
        err = d.stderr.read()
        rc = d.wait(timeout=300)
        assert rc == 0 and "DRIVER OK" in "".join(out), "".join(out) + err + "\nsbxd: %s" % s.logs[-8:]
        assert asked == 2, out
        print("".join(out), "(%.1f s)" % (time.time() - t0))
    finally:
        d.kill()
        s.stop()
