"""Runs inside a Python >= 3.12 that has DeerFlow's dependencies (test_aio_sdk.py starts it):
DeerFlow's real AioSandboxProvider, in provisioner mode, against the sbxd at
$SBX_PROVISIONER_URL. Prints DRIVER OK at the end; any failed check raises."""
import json
import os
import sys
import tempfile
import time
import urllib.request

URL = os.environ["SBX_PROVISIONER_URL"]
KEY = os.environ["SBX_PROVISIONER_KEY"]

cfg_dir = tempfile.mkdtemp(prefix="sbx-deerflow-")
cfg = os.path.join(cfg_dir, "config.yaml")
with open(cfg, "w") as f:
    # the one line that matters is provisioner_url (docs/deerflow.md)
    f.write("sandbox:\n"
            "  use: deerflow.community.aio_sandbox:AioSandboxProvider\n"
            "  provisioner_url: %s\n"
            "  provisioner_api_key: %s\n"
            "  idle_timeout: 0\n" % (URL, KEY))
os.environ["DEER_FLOW_CONFIG_PATH"] = cfg

from deerflow.community.aio_sandbox import AioSandboxProvider  # noqa: E402
from deerflow_contract import check, contract  # noqa: E402 (this folder is sys.path[0])


def prov(method, path):
    req = urllib.request.Request(URL + path, method=method, headers={"X-API-Key": KEY})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())




p = AioSandboxProvider()
t0 = time.perf_counter()
sid_a = p.acquire("thread-a", user_id="alice")
sb = p.get(sid_a)
first = sb.execute_command("echo first")
check(first.strip() == "first", "execute_command on a new thread (%.0f ms)" % ((time.perf_counter() - t0) * 1000))

contract(sb)

# two threads are isolated
sid_b = p.acquire("thread-b", user_id="alice")
check(sid_b != sid_a, "another thread, another sandbox")
check(p.get(sid_b).read_file("/mnt/user-data/workspace/notes.txt").startswith("Error"), "threads isolated")

# release and reacquire: the same sandbox (warm), its files intact
p.release(sid_a)
again = p.acquire("thread-a", user_id="alice")
check(again == sid_a and p.get(again).read_file("/mnt/user-data/workspace/notes.txt").startswith("alpha"),
      "release and reacquire")

# killed behind the provider's back: the provider recreates it
prov("DELETE", "/api/sandboxes/" + sid_b)
p.release(sid_b)
sid_b2 = p.acquire("thread-b", user_id="alice")
check(p.get(sid_b2).execute_command("echo back").strip() == "back", "recreated after it vanished")

p.destroy(sid_a)
check(all(s["sandbox_id"] != sid_a for s in prov("GET", "/api/sandboxes")["sandboxes"]), "destroy")
p.shutdown()
print("DRIVER OK")
sys.exit(0)
