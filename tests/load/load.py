#!/usr/bin/env python3
"""Bounded load test of sbx (loopback only; stops by itself; not part of `make check`).

Hundreds of sandboxes, thousands of commands and file operations in parallel, through the real
`sbx` CLI (mode cli) or sbxd's contract API on 127.0.0.1 (mode sbxd; skipped when sbxd is not
built). Reports throughput and p50/p99 latency per phase, the errors (must be 0), and whether
the host came back to its baseline: MemAvailable before/after, leftover cgroup directories and
sbx-init processes.

    tests/load/run.sh [--sandboxes N] [--execs N] [--fileops N] [--workers N] [--mode cli|sbxd]

Exit status 0 only with no error and nothing left behind."""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SBX_SOURCE") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("SBX_BUILD") or os.path.join(SOURCE, "build"))
WS = "/mnt/user-data/workspace"


def meminfo_mib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    return 0


def mem_available_mib():
    return meminfo_mib("MemAvailable")


def sbx_cgroup_dirs(ids):
    found = []
    for top, dirs, _ in os.walk("/sys/fs/cgroup"):
        if os.path.basename(top) == "sbx":
            found += [os.path.join(top, d) for d in dirs if d.split("-")[0] in ids]
            dirs[:] = []
        elif top.count("/") >= 7:
            dirs[:] = []
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


class Phase:
    def __init__(self, name):
        self.name, self.lat, self.errors, self.samples = name, [], 0, []
        self.lock = threading.Lock()
        self.t0 = self.t1 = 0.0

    def record(self, dt, ok, detail=None):
        with self.lock:
            self.lat.append(dt)
            if not ok:
                self.errors += 1
                if len(self.samples) < 5:
                    self.samples.append(detail)

    def row(self):
        wall = max(self.t1 - self.t0, 1e-9)
        return (self.name, len(self.lat), self.errors, len(self.lat) / wall,
                pct(self.lat, 50) * 1000, pct(self.lat, 99) * 1000,
                (max(self.lat) if self.lat else 0) * 1000, wall)


class CliDriver:
    def __init__(self, home, config):
        self.base = [os.path.join(BUILD, "sbx"), "--home", home, "--config", config]

    def run(self, args, input=b"", timeout=120):
        p = subprocess.run(self.base + args, input=input, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def acquire(self, t):
        rc, out, err = self.run(["exec", "-t", t, "--", "true"])
        return rc == 0, err

    def exec(self, t, i):
        rc, out, err = self.run(["exec", "-t", t, "--", "echo %d" % i])
        return rc == 0 and out == b"%d\n" % i, err

    def fileop(self, t, i):
        kind = i % 6
        path = "%s/f%d.txt" % (WS, i % 50)
        if kind == 0:
            rc, out, err = self.run(["write", "-t", t, path], input=b"line %d\n" % i)
            return rc == 0, err
        if kind == 1:
            rc, out, err = self.run(["upload", "-t", t, path], input=b"up %d\n" % i)
            return rc == 0, err
        if kind == 2:
            rc, out, err = self.run(["read", "-t", t, WS + "/seed.txt"])
            return rc == 0 and out == b"seed\n", err
        if kind == 3:
            rc, out, err = self.run(["ls", "-t", t, WS, "--json"])
            return rc == 0 and b"seed.txt" in out, err
        if kind == 4:
            rc, out, err = self.run(["glob", "-t", t, WS, "**/*.txt", "--json"])
            return rc == 0 and b"seed.txt" in out, err
        rc, out, err = self.run(["grep", "-t", t, WS, "seed", "--json"])
        return rc == 0 and b"seed.txt" in out, err

    def seed(self, t):
        rc, out, err = self.run(["write", "-t", t, WS + "/seed.txt"], input=b"seed\n")
        return rc == 0, err

    def pids(self):
        rc, out, err = self.run(["ps", "--json"])
        return {s["id"]: s["pid"] for s in json.loads(out)["sandboxes"]} if rc == 0 else {}

    def down(self):
        return self.run(["down"], timeout=600)[0] == 0

    def close(self):
        pass


class SbxdDriver(CliDriver):
    """sbxd's contract API (POST /v1/contract/acquire, /v1/sandboxes/{id}/contract/{op})."""

    def __init__(self, home, config):
        super().__init__(home, config)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([os.path.join(BUILD, "sbxd"), "--listen", "127.0.0.1:0",
                                      "--home", home, "--config", config],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        end = time.time() + 20
        while self.port is None and time.time() < end and self.proc.poll() is None:
            time.sleep(0.1)
            self.log.seek(0)
            m = re.search(rb'"address"\s*:\s*"127\.0\.0\.1:(\d+)"', self.log.read())
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("sbxd did not start")
        self.ids = {}
        self.local = threading.local()

    def post(self, path, body):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.local.conn = None
            return 599, str(e).encode()
        return r.status, data

    def op(self, t, name, body):
        return self.post("/v1/sandboxes/%s/contract/%s" % (self.ids[t], name), body)

    def acquire(self, t):
        st, data = self.post("/v1/contract/acquire", {"user": "load", "thread": t})
        if st == 200:
            self.ids[t] = json.loads(data)["sandbox_id"]
        return st == 200, data

    def exec(self, t, i):
        st, data = self.op(t, "execute_command", {"command": "echo %d" % i})
        return st == 200 and json.loads(data).get("stdout") == "%d\n" % i, data

    def seed(self, t):
        st, data = self.op(t, "write_file", {"path": WS + "/seed.txt", "content": "seed\n"})
        return st == 200, data

    def fileop(self, t, i):
        kind = i % 5
        if kind == 0:
            st, data = self.op(t, "write_file", {"path": "%s/f%d.txt" % (WS, i % 50),
                                                 "content": "line %d\n" % i})
            return st == 200, data
        if kind == 1:
            st, data = self.op(t, "read_file", {"path": WS + "/seed.txt"})
            return st == 200 and b"seed" in data, data
        if kind == 2:
            st, data = self.op(t, "list_dir", {"path": WS})
            return st == 200 and b"seed.txt" in data, data
        if kind == 3:
            st, data = self.op(t, "glob", {"path": WS, "pattern": "**/*.txt"})
            return st == 200 and b"seed.txt" in data, data
        st, data = self.op(t, "grep", {"path": WS, "pattern": "seed"})
        return st == 200 and b"seed.txt" in data, data

    def close(self):
        for t in list(self.ids):
            self.post("/v1/contract/release", {"sandbox_id": self.ids[t]})
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_phase(name, n, workers, fn):
    ph = Phase(name)
    ph.t0 = time.monotonic()

    def one(i):
        t0 = time.monotonic()
        try:
            ok, detail = fn(i)
        except Exception as e:  # a crash of the driver counts as an error, with its text
            ok, detail = False, repr(e)
        ph.record(time.monotonic() - t0, ok, detail)

    with cf.ThreadPoolExecutor(workers) as ex:
        list(ex.map(one, range(n)))
    ph.t1 = time.monotonic()
    return ph


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sandboxes", type=int, default=200)
    ap.add_argument("--execs", type=int, default=2000)
    ap.add_argument("--fileops", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=max(4, 4 * (os.cpu_count() or 1)))
    ap.add_argument("--mode", choices=["cli", "sbxd"], default="cli")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(BUILD, "sbx")):
        print("load: %s/sbx is not built" % BUILD, file=sys.stderr)
        return 2
    if a.mode == "sbxd" and not os.path.exists(os.path.join(BUILD, "sbxd")):
        print("load: SKIP (mode sbxd: %s/sbxd is not built)" % BUILD)
        return 0
    random.seed(a.seed)
    tmp = tempfile.mkdtemp(prefix="sbx-load-")
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    config = os.path.join(tmp, "config.yaml")
    with open(config, "w") as f:
        f.write("sandbox:\n  replicas: %d\n  idle_timeout: 3600\n  max_sandboxes: 0\n"
                "  max_sandboxes_per_user: 0\n  memory_overcommit: 0\n" % (a.sandboxes + 16))
    run_tag = "load%s" % os.urandom(3).hex()
    threads = ["%s-%d" % (run_tag, i) for i in range(a.sandboxes)]

    mem_before = mem_available_mib()
    slab_before = meminfo_mib("Slab")
    mem_min = [mem_before]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.25):
            mem_min[0] = min(mem_min[0], mem_available_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    drv = SbxdDriver(home, config) if a.mode == "sbxd" else CliDriver(home, config)
    phases = []
    try:
        phases.append(run_phase("create (cold start)", a.sandboxes, a.workers,
                                lambda i: drv.acquire(threads[i])))
        phases.append(run_phase("seed file", a.sandboxes, a.workers,
                                lambda i: drv.seed(threads[i])))
        phases.append(run_phase("exec (warm)", a.execs, a.workers,
                                lambda i: drv.exec(threads[random.randrange(a.sandboxes)], i)))
        phases.append(run_phase("file ops", a.fileops, a.workers,
                                lambda i: drv.fileop(threads[random.randrange(a.sandboxes)], i)))
        running = CliDriver(home, config).pids()
        mem_loaded = mem_available_mib()
    finally:
        drv.close()
        t0 = time.monotonic()
        down_ok = CliDriver(home, config).down()
        down_s = time.monotonic() - t0
        stop.set()
        sampler.join()
    time.sleep(2)  # let the kernel free what the sandboxes held
    mem_after = mem_available_mib()
    slab_after = meminfo_mib("Slab")
    ids = set(running)
    left_cg = sbx_cgroup_dirs(ids)
    left_procs = [p for p in running.values() if alive(p)]
    shutil.rmtree(tmp, ignore_errors=True)

    errors = sum(p.errors for p in phases)
    print("sbx load test: mode %s, %d sandboxes, %d workers, host %d CPUs" % (
        a.mode, a.sandboxes, a.workers, os.cpu_count() or 0))
    print()
    print("| phase | ops | errors | ops/s | p50 ms | p99 ms | max ms | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        print("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f |" % p.row())
    print()
    print("| resource | value |")
    print("|---|---|")
    print("| sandboxes running at peak | %d |" % len(running))
    print("| MemAvailable before | %d MiB |" % mem_before)
    print("| MemAvailable lowest during | %d MiB |" % mem_min[0])
    print("| MemAvailable with all sandboxes up | %d MiB (%.2f MiB per sandbox) |" % (
        mem_loaded, (mem_before - mem_loaded) / max(1, len(running))))
    print("| MemAvailable after `sbx down` | %d MiB (%+d MiB vs before) |" % (
        mem_after, mem_after - mem_before))
    print("| kernel slab after vs before | %+d MiB (dentries, inodes, freed cgroups the kernel "
          "reclaims lazily) |" % (slab_after - slab_before))
    print("| `sbx down` of everything | %.1f s, %s |" % (down_s, "ok" if down_ok else "FAILED"))
    print("| leftover cgroup directories | %d |" % len(left_cg))
    print("| leftover sbx-init processes | %d |" % len(left_procs))
    for p in phases:
        for s in p.samples:
            print("error in %s: %r" % (p.name, s[:300] if isinstance(s, (bytes, str)) else s))
    # memory must come back: within 5% of the machine's baseline or 256 MiB, whichever is larger
    slack = max(256, mem_before // 20)
    ok = (errors == 0 and down_ok and not left_cg and not left_procs
          and mem_after >= mem_before - slack and len(running) == a.sandboxes)
    print()
    print("RESULT: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
