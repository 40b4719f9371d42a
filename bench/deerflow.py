#!/usr/bin/env python3
"""DeerFlow's first tool call on a new thread, through sbxd, by its two providers' wire paths:

- aio: AioSandboxProvider in provisioner mode (DeerFlow main's default provider):
  POST /api/sandboxes (RemoteSandboxBackend.create), GET {sandbox_url}/v1/sandbox
  (wait_for_sandbox_ready), POST {sandbox_url}/v1/shell/exec {"command": "echo hi",
  "no_change_timeout": 600} (AioSandbox.execute_command);
- osb: the OpenSandbox provider through the OpenSandbox SDK: POST /v1/sandboxes,
  GET /v1/sandboxes/{id}/endpoints/44772, GET {endpoint}/ping, POST {endpoint}/command
  (the event stream read to its end).

Each sample is one whole first call on a new thread (a new sandbox), from the first request
written to the command's output read, each request on a new connection (as requests and the
SDKs' first calls are); the sandbox is deleted after the sample, outside the timing. The two
cases run interleaved, round-robin with the starting case rotating.

  bench/deerflow.py [--build DIR] [-n SAMPLES] [--warmup N] [--spares N] [--json FILE]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse

KEY = "bench-key"


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def call(port, method, path, body=None, headers=None, host="127.0.0.1"):
    c = http.client.HTTPConnection(host, port, timeout=60)
    try:
        h = dict(headers or {})
        if body is not None:
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, data[:200]))
        return data
    finally:
        c.close()


def aio_first_call(port, n):
    t0 = time.perf_counter()
    j = json.loads(call(port, "POST", "/api/sandboxes",
                        {"sandbox_id": "bench%d" % n, "thread_id": "thread-%d" % n, "user_id": "bench",
                         "include_legacy_skills": False, "provision_lark_cli_runtime": False,
                         "provision_lark_cli_broker": False}, {"X-API-Key": KEY}))
    base = urllib.parse.urlsplit(j["sandbox_url"]).path
    call(port, "GET", base + "/v1/sandbox")
    out = json.loads(call(port, "POST", base + "/v1/shell/exec", {"command": "echo hi", "no_change_timeout": 600}))
    dt = (time.perf_counter() - t0) * 1000
    assert out["data"]["output"] == "hi\n", out
    return dt, lambda: call(port, "DELETE", "/api/sandboxes/bench%d" % n, headers={"X-API-Key": KEY})


def osb_first_call(port, n):
    t0 = time.perf_counter()
    j = json.loads(call(port, "POST", "/v1/sandboxes",
                        {"image": {"uri": "host"}, "entrypoint": ["tail", "-f", "/dev/null"],
                         "timeout": 14400, "resourceLimits": {"cpu": "1", "memory": "2Gi"}, "env": {},
                         "metadata": {"deer_flow_thread_id": "thread-%d" % n}}))
    sid = j["id"]
    ep = json.loads(call(port, "GET", "/v1/sandboxes/%s/endpoints/44772" % sid))
    path = "/" + ep["endpoint"].split("/", 1)[1]
    tok = ep["headers"]
    call(port, "GET", path + "/ping", headers=tok)
    out = call(port, "POST", path + "/command", {"command": "echo hi"}, tok)
    dt = (time.perf_counter() - t0) * 1000
    assert b"hi" in out, out
    return dt, lambda: call(port, "DELETE", "/v1/sandboxes/" + sid)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(here), "build"))
    ap.add_argument("-n", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--spares", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sbx-bench-deerflow-")
    cfg = os.path.join(home, "config.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  spares: %d\n" % a.spares)
    env = dict(os.environ, PROVISIONER_API_KEY=KEY, SBXD_LOG_LEVEL="info")
    d = subprocess.Popen([os.path.join(a.build, "sbxd"), "--listen", "127.0.0.1:0", "--home", home,
                          "--config", cfg], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    port = None
    try:
        for line in d.stderr:
            rec = json.loads(line)
            if rec.get("msg") == "listening":
                port = int(rec["address"].rsplit(":", 1)[1])
                break
        threading.Thread(target=lambda: [None for _ in d.stderr], daemon=True).start()
        cases = {"aio": aio_first_call, "osb": osb_first_call}
        names = list(cases)
        samples = {k: [] for k in names}
        for i in range(a.n + a.warmup):
            order = names[i % len(names):] + names[:i % len(names)]
            for k in order:
                if a.spares:
                    time.sleep(0.05)  # let the filler replace the spare taken
                dt, cleanup = cases[k](port, i)
                cleanup()
                if i >= a.warmup:
                    samples[k].append(dt)
        print(f"{'case':<5} {'median ms':>10} {'p10':>8} {'p90':>8} {'n':>5}")
        out = {}
        for k in names:
            v = samples[k]
            out[k] = {"median_ms": statistics.median(v), "p10_ms": pct(v, 10), "p90_ms": pct(v, 90), "n": len(v)}
            print(f"{k:<5} {statistics.median(v):>10.2f} {pct(v, 10):>8.2f} {pct(v, 90):>8.2f} {len(v):>5}")
        print(f"spares: {a.spares}; load average: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        d.terminate()
        d.wait(timeout=30)
        subprocess.run([os.path.join(a.build, "sbx"), "--home", home, "down"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
