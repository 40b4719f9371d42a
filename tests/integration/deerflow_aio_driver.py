"""Runs inside a Python >= 3.12 with DeerFlow's dependencies (test_aio_sdk.py starts it):
DeerFlow's real AioSandboxProvider, in provisioner mode, against the sbxd at
$SBX_PROVISIONER_URL, with stand-ins for the LLM libraries its module imports
(deerflow_llm_placeholders.py: calling one fails).

    deerflow_aio_driver.py main       # the provider's whole life, below
    deerflow_aio_driver.py peer KIND  # a second gateway process (KIND: memory or redis)

main asks the test for what only the host can do (restart sbxd, kill a sandbox's init) with a
line "ASK <what>" on stdout, then waits for $SBX_DRIVER_DIR/answer-<n>. Prints DRIVER OK at the
end; any failed check raises."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import deerflow_llm_placeholders  # this folder is sys.path[0]
from deerflow.community.aio_sandbox import AioSandboxProvider
from deerflow_contract import check, contract, write_config

deerflow_llm_placeholders.arm()

URL = os.environ["SBX_PROVISIONER_URL"]
KEY = os.environ["SBX_PROVISIONER_KEY"]
WORK = os.environ["SBX_DRIVER_DIR"]
# the idle checker's period (60 s) is a class attribute: shortened so idle release is seen in
# seconds; idle_timeout itself comes from config.yaml as in production
AioSandboxProvider.IDLE_CHECK_INTERVAL = 0.3


def prov(method, path):
    req = urllib.request.Request(URL + path, method=method, headers={"X-API-Key": KEY})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def exists(sid):
    return prov("GET", "/api/sandboxes/" + sid)[0] == 200


def sbx_id(sid):
    """sbx's own id of the sandbox DeerFlow calls sid: its sandbox_url is .../aio/<id>"""
    return prov("GET", "/api/sandboxes/" + sid)[1]["sandbox_url"].split("/aio/")[1].split("/")[0]


def until(cond, what, timeout=15):
    end = time.time() + timeout
    while not cond():
        if time.time() > end:
            raise AssertionError("timed out: " + what)
        time.sleep(0.1)
    check(True, what)


asked = 0


def ask(what):
    global asked
    asked += 1
    answer = os.path.join(WORK, "answer-%d" % asked)
    print("ASK", what, flush=True)
    until(lambda: os.path.exists(answer), "the test did: " + what, 120)


def peer(kind):
    """A second gateway process started while main holds thread-shared: its startup reconcile
    lists every sandbox, and its idle checker (idle_timeout 1 s) destroys what it adopted. With
    redis leases it must leave main's live sandbox alone; with memory ones (the positive
    control: the #4206 bug) it adopts and destroys it."""
    sid = sys.argv[3]
    p = AioSandboxProvider()
    time.sleep(4)
    alive = exists(sid)
    if kind == "redis":
        check(alive, "a peer on redis leases left a live peer's sandbox alone")
        # the thread's next turn lands on this peer: it takes the lease and finds the sandbox
        again = p.acquire("thread-shared", user_id="alice")
        check(again == sid and p.get(again).execute_command("cat /tmp/marker").strip() == "main",
              "the peer took over the thread's sandbox, state intact")
        p.release(again)
    else:
        check(not alive, "positive control: a peer on memory leases destroyed a live peer's sandbox")
    print("PEER OK", flush=True)
    os._exit(0)  # a gateway worker that dies: no shutdown, which would destroy what it holds


def start_redis():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    r = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                          "--appendonly", "no"], stdout=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as so:
            if so.connect_ex(("127.0.0.1", port)) == 0:
                return r, "redis://127.0.0.1:%d/0" % port
        time.sleep(0.05)
    raise AssertionError("redis-server did not start")


def run_peer(kind, sid, url=None):
    extra = {"idle_timeout": 1, "ownership": {"type": kind, "renewal_interval_seconds": 1}}
    if url:
        extra["ownership"]["redis_url"] = url
    write_config(URL, KEY, **extra)
    r = subprocess.run([sys.executable, __file__, "peer", kind, sid], capture_output=True, text=True,
                       timeout=120)
    print(r.stdout, end="", flush=True)
    assert r.returncode == 0 and "PEER OK" in r.stdout, r.stdout + r.stderr


def main():
    write_config(URL, KEY, idle_timeout=0, replicas=3)
    print("LLM libraries standing in:", len(deerflow_llm_placeholders.placed), flush=True)
    if "langchain_core.messages" in deerflow_llm_placeholders.placed:
        import langchain_core.messages
        try:
            langchain_core.messages.HumanMessage("hi")
            raise SystemExit("a stand-in answered a call")
        except AssertionError:
            check(True, "a call into an LLM library stand-in fails")
    p = AioSandboxProvider()
    t0 = time.perf_counter()
    sid_a = p.acquire("thread-a", user_id="alice")
    sb = p.get(sid_a)
    first = sb.execute_command("echo first")
    check(first.strip() == "first", "execute_command on a new thread (%.0f ms)" % ((time.perf_counter() - t0) * 1000))

    contract(sb)
    # the provider's request carried DeerFlow main's extra mounts (its Lark CLI folders: config
    # read-only, locks and data writable; the acp-workspace), and sbxd mounted them
    lark = sb.execute_command("touch /mnt/integrations/lark-cli/data/t /mnt/integrations/lark-cli/"
                              "config/locks/l && echo rw; touch /mnt/integrations/lark-cli/config/x "
                              "2>/dev/null || echo ro; test -d /mnt/acp-workspace && echo acp")
    check(lark.split() == ["rw", "ro", "acp"], "DeerFlow main's Lark CLI and acp mounts (%r)" % lark)

    # two threads are isolated
    t0 = time.perf_counter()
    sid_b = p.acquire("thread-b", user_id="alice")
    p.get(sid_b).execute_command("true")
    check(sid_b != sid_a, "another thread, another sandbox (its first call %.0f ms: the process warm)"
          % ((time.perf_counter() - t0) * 1000))
    check(p.get(sid_b).read_file("/mnt/user-data/workspace/notes.txt").startswith("Error"), "threads isolated")

    # release and reacquire: the same sandbox from the warm pool, its files intact
    p.get(sid_a).execute_command("echo warm > /tmp/marker")
    p.release(sid_a)
    check(exists(sid_a), "released: the sandbox stays (warm pool)")
    again = p.acquire("thread-a", user_id="alice")
    check(again == sid_a and p.get(again).execute_command("cat /tmp/marker").strip() == "warm",
          "release and reacquire: the same sandbox")

    # removed behind the provider's back: the provider recreates it on the next acquire
    prov("DELETE", "/api/sandboxes/" + sid_b)
    p.release(sid_b)
    sid_b2 = p.acquire("thread-b", user_id="alice")
    check(p.get(sid_b2).execute_command("echo back").strip() == "back", "recreated after it was removed")

    # its init killed behind everyone's back: sbx reaps it, the provider recreates it
    p.get(sid_b2).execute_command("echo old > /tmp/marker")
    p.release(sid_b2)
    ask("kill " + sbx_id(sid_b2))
    sid_b3 = p.acquire("thread-b", user_id="alice")
    check(p.get(sid_b3).execute_command("cat /tmp/marker 2>/dev/null || echo fresh").strip() == "fresh",
          "recreated after its init was killed")

    # replicas 3: with a and b warm and c active, d evicts the oldest warm one (a)
    p.release(sid_a)
    p.release(sid_b3)
    sid_c = p.acquire("thread-c", user_id="alice")
    sid_d = p.acquire("thread-d", user_id="alice")
    check(not exists(sid_a) and exists(sid_b3) and exists(sid_c) and exists(sid_d),
          "replicas: the oldest warm sandbox evicted, the others kept")

    # sbxd restarted under a live provider: the same sandbox_url goes on working
    p.get(sid_c).execute_command("echo kept > /tmp/marker")
    ask("restart sbxd")
    check(p.get(sid_c).execute_command("cat /tmp/marker").strip() == "kept", "sbxd restarted: the sandbox adopted")
    p.release(sid_c)
    check(p.acquire("thread-c", user_id="alice") == sid_c, "and reacquired after the restart")

    p.destroy(sid_c)
    check(not exists(sid_c), "destroy")
    p.shutdown()
    check(prov("GET", "/api/sandboxes")[1]["sandboxes"] == [], "shutdown destroys active and warm sandboxes")

    # idle release: idle_timeout 1 s, an active sandbox nobody touches is destroyed
    write_config(URL, KEY, idle_timeout=1)
    p = AioSandboxProvider()
    sid_i = p.acquire("thread-idle", user_id="alice")
    until(lambda: not exists(sid_i), "idle_timeout: an idle sandbox destroyed")
    p.shutdown()

    # leases: a second gateway process must not adopt (and idle-destroy) a sandbox this one holds
    redis, url = start_redis()
    try:
        for kind in ("memory", "redis"):
            write_config(URL, KEY, idle_timeout=0,
                         ownership={"type": kind, "renewal_interval_seconds": 1, "redis_url": url})
            p = AioSandboxProvider()
            sid = p.acquire("thread-shared", user_id="alice")
            p.get(sid).execute_command("echo main > /tmp/marker")
            run_peer(kind, sid, url if kind == "redis" else None)
            p.shutdown()
    finally:
        redis.kill()
    # the redis peer died holding thread-shared's lease: nobody reaps its sandbox, so this does
    for s in prov("GET", "/api/sandboxes")[1]["sandboxes"]:
        prov("DELETE", "/api/sandboxes/" + s["sandbox_id"])
    print("DRIVER OK")


if __name__ == "__main__":
    if sys.argv[1] == "peer":
        peer(sys.argv[2])
    main()
    sys.exit(0)
