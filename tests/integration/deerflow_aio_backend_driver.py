"""Runs inside a Python >= 3.12 with pydantic 2, httpx, requests and pyyaml (test_aio_sdk.py
starts it): DeerFlow's own sandbox-facing classes, unchanged from bytedance/deer-flow, against
the sbxd at $SBX_PROVISIONER_URL:

- RemoteSandboxBackend (remote_backend.py): the provisioner client AioSandboxProvider uses in
  remote mode for create, discover, is_alive, list_running (orphan reconcile) and destroy;
- wait_for_sandbox_ready (backend.py): the provider's readiness poll of the sandbox_url;
- AioSandbox (aio_sandbox.py): every Sandbox method DeerFlow's tools call.

These need no LLM library. AioSandboxProvider's module does (it imports
deerflow.integrations.lark_cli -> skills.installer -> skills.security_scanner -> deerflow.models:
langchain, langgraph, langchain_openai, on no registry CI reaches): deerflow_aio_driver.py runs it
with stand-ins for those. Here, the packages whose __init__ alone drags them in
(deerflow.runtime, deerflow.skills and deerflow.community.aio_sandbox, which imports the
provider) are entered without running their __init__: every module below that is DeerFlow's
real file, and one that needs an LLM framework fails the import loudly rather than being
replaced.

    deerflow_aio_backend_driver.py create STATE   # first run
    deerflow_aio_backend_driver.py adopt STATE    # after the test restarted sbxd

Prints DRIVER OK at the end; any failed check raises."""
import hashlib
import importlib.util
import json
import os
import sys
import time
import types

URL = os.environ["SBX_PROVISIONER_URL"]
KEY = os.environ["SBX_PROVISIONER_KEY"]
HARNESS = os.environ["SBX_DEERFLOW_HARNESS"]

from deerflow_contract import check, contract, write_config  # noqa: E402 (this folder is sys.path[0])

write_config(URL, KEY)

for pkg in ("deerflow.runtime", "deerflow.skills", "deerflow.community.aio_sandbox"):
    path = os.path.join(HARNESS, *pkg.split("."))
    init = os.path.join(path, "__init__.py")
    assert os.path.exists(init), "no package %s in %s" % (pkg, HARNESS)
    m = types.ModuleType(pkg)
    m.__path__, m.__file__, m.__package__ = [path], init, pkg
    m.__spec__ = importlib.util.spec_from_file_location(pkg, init, submodule_search_locations=[path])
    sys.modules[pkg] = m

from deerflow.community.aio_sandbox.aio_sandbox import AioSandbox  # noqa: E402
from deerflow.community.aio_sandbox.backend import wait_for_sandbox_ready  # noqa: E402
from deerflow.community.aio_sandbox.remote_backend import RemoteSandboxBackend  # noqa: E402
from deerflow.config.paths import VIRTUAL_PATH_PREFIX, get_paths, join_host_path  # noqa: E402




def sandbox_id(thread, user):
    # AioSandboxProvider._deterministic_sandbox_id
    return hashlib.sha256(("%s:%s" % (user, thread)).encode()).hexdigest()[:16]


def extra_mounts(thread, user):
    """AioSandboxProvider._get_extra_mounts of DeerFlow main, with DeerFlow's own Paths (its
    module needs an LLM library: see above): the thread's folders, the skills views, the
    integration skills and the Lark CLI folders, each made first as the provider makes them
    (ensure_thread_dirs; the skills projection; ensure_lark_cli_credential_tree, owner-only).
    RemoteSandboxBackend then keeps those the provisioner takes (_provisioner_extra_mounts_payload):
    all but /mnt/user-data/* and /mnt/skills/{public,legacy}."""
    paths = get_paths()
    paths.ensure_thread_dirs(thread, user_id=user)
    base = str(paths.host_base_dir)
    lark_cfg = paths.host_user_integration_config_dir(user, "lark-cli")
    lark_data = paths.host_user_integration_data_dir(user, "lark-cli")
    views = [join_host_path(base, "skills_view", "public")] + [
        join_host_path(base, "users", user, "skills_view", v) for v in ("custom", "legacy", "integrations")]
    for d in views:
        os.makedirs(d, exist_ok=True)
    for d in (os.path.dirname(lark_cfg), lark_cfg, join_host_path(lark_cfg, "locks"), lark_data):
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
    return [
        (paths.host_sandbox_work_dir(thread, user_id=user), VIRTUAL_PATH_PREFIX + "/workspace", False),
        (paths.host_sandbox_uploads_dir(thread, user_id=user), VIRTUAL_PATH_PREFIX + "/uploads", False),
        (paths.host_sandbox_outputs_dir(thread, user_id=user), VIRTUAL_PATH_PREFIX + "/outputs", False),
        (paths.host_acp_workspace_dir(thread, user_id=user), "/mnt/acp-workspace", True),
        (views[0], "/mnt/skills/public", True),
        (views[1], "/mnt/skills/custom", True),
        (views[2], "/mnt/skills/legacy", True),
        (views[3], "/mnt/skills/integrations", True),
        # deerflow.integrations.lark_cli's LARK_CLI_SANDBOX_{CONFIG,LOCKS,DATA}_DIR
        (lark_cfg, "/mnt/integrations/lark-cli/config", True),
        (join_host_path(lark_cfg, "locks"), "/mnt/integrations/lark-cli/config/locks", False),
        (lark_data, "/mnt/integrations/lark-cli/data", False),
    ]


def acquire(backend, thread, user):
    """What AioSandboxProvider._create_sandbox does in remote mode (DeerFlow main's mounts)."""
    sid = sandbox_id(thread, user)
    info = backend.create(thread, sid, extra_mounts(thread, user), user_id=user)
    check(wait_for_sandbox_ready(info.sandbox_url, timeout=60), "sandbox %s ready" % sid)
    return sid, info, AioSandbox(id=sid, base_url=info.sandbox_url)


backend = RemoteSandboxBackend(URL, api_key=KEY)
state_file = sys.argv[2]

if sys.argv[1] == "create":
    t0 = time.perf_counter()
    sid_a, info_a, sb = acquire(backend, "thread-a", "alice")
    first = sb.execute_command("echo first")
    check(first.strip() == "first",
          "create + first execute_command on a new thread (%.0f ms)" % ((time.perf_counter() - t0) * 1000))
    check(sb.execute_command("cd /tmp && export KEEP=1") is not None and
          sb.execute_command("echo $KEEP; pwd").split() == ["1", "/tmp"], "the shell persists")

    contract(sb)
    # DeerFlow main's extra mounts are in: the Lark CLI folders (config read-only, its locks and
    # data writable) and the acp-workspace
    lark = sb.execute_command("touch /mnt/integrations/lark-cli/data/t /mnt/integrations/lark-cli/"
                              "config/locks/l && echo rw; touch /mnt/integrations/lark-cli/config/x "
                              "2>/dev/null || echo ro; test -d /mnt/acp-workspace && echo acp")
    check(lark.split() == ["rw", "ro", "acp"], "DeerFlow main's Lark CLI and acp mounts (%r)" % lark)

    # the provider's bookkeeping calls
    check(backend.is_alive(info_a), "is_alive")
    d = backend.discover(sid_a)
    check(d is not None and d.sandbox_url == info_a.sandbox_url, "discover")
    check(backend.discover("no-such-sandbox") is None, "discover of a missing sandbox")
    again = backend.create("thread-a", sid_a, extra_mounts("thread-a", "alice"), user_id="alice")
    check(again.sandbox_url == info_a.sandbox_url and
          AioSandbox(id=sid_a, base_url=again.sandbox_url).read_file(
              "/mnt/user-data/workspace/notes.txt").startswith("alpha"), "create of an existing id (idempotent)")

    # two threads are isolated
    sid_b, info_b, sb_b = acquire(backend, "thread-b", "alice")
    check(sid_b != sid_a, "another thread, another sandbox")
    check(sb_b.read_file("/mnt/user-data/workspace/notes.txt").startswith("Error"), "threads isolated")
    sb.execute_command("echo mine > /tmp/mine")
    check(sb_b.execute_command("cat /tmp/mine 2>&1; echo rc=$?").strip().endswith("rc=1"),
          "threads isolated beyond /mnt/user-data")
    # (DeerFlow's provisioner names the thread folder by thread_id alone: ids are unique per thread)
    sid_c, info_c, sb_c = acquire(backend, "thread-c", "bob")
    check(sid_c not in (sid_a, sid_b) and
          sb_c.read_file("/mnt/user-data/workspace/notes.txt").startswith("Error"), "another user's thread")
    running = {i.sandbox_id for i in backend.list_running()}
    check({sid_a, sid_b, sid_c} <= running, "list_running (orphan reconcile)")

    # gone behind the provider's back: is_alive says so, and a create makes it anew
    backend.destroy(info_b)
    check(not backend.is_alive(info_b) and backend.discover(sid_b) is None, "destroyed: not alive")
    sid_b2, _, sb_b2 = acquire(backend, "thread-b", "alice")
    check(sid_b2 == sid_b and sb_b2.execute_command("echo back").strip() == "back", "recreated after it vanished")
    backend.destroy(info_c)
    with open(state_file, "w") as f:
        # sbx's own id for the test, which kills it while sbxd is down: /aio/<sbx id>/<token>
        b_sbx = backend.discover(sid_b).sandbox_url.split("/aio/")[1].split("/")[0]
        json.dump({"a": [sid_a, info_a.sandbox_url], "b": sid_b, "b_sbx": b_sbx}, f)
else:
    with open(state_file) as f:
        st = json.load(f)
    sid_a, url_a = st["a"]
    # a new provider process after sbxd restarted: list_running adopts, discover finds
    check(sid_a in {i.sandbox_id for i in backend.list_running()}, "list_running after sbxd restarted")
    d = backend.discover(sid_a)
    check(d is not None and d.sandbox_url == url_a and wait_for_sandbox_ready(d.sandbox_url, timeout=60),
          "discover after sbxd restarted")
    sb = AioSandbox(id=sid_a, base_url=d.sandbox_url)
    check(sb.read_file("/mnt/user-data/workspace/notes.txt").startswith("alpha"), "files kept across the restart")
    check(sb.execute_command("echo alive").strip() == "alive", "execute_command after the restart")
    # thread-b's sandbox was killed while sbxd was down: not alive, and the next acquire replaces it
    info_b = backend.discover(st["b"])
    check(info_b is None or not backend.is_alive(info_b), "a sandbox killed behind the provider's back: not alive")
    _, _, sb_b = acquire(backend, "thread-b", "alice")
    check(sb_b.execute_command("echo again").strip() == "again", "replaced after it was killed")
    for sid in (sid_a, st["b"]):
        backend.destroy(backend.discover(sid))
    check(not ({sid_a, st["b"]} & {i.sandbox_id for i in backend.list_running()}), "destroy")
print("DRIVER OK")
