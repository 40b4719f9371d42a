"""Helpers of the security suite (tests/security): the integration suite's Sbx driver, the static
probe, and host-side checks (cgroups, processes, mounts, memory) that tell whether an attack
stayed inside its sandbox."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SBX_SOURCE") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("SBX_BUILD") or os.path.join(SOURCE, "build"))
SBX = os.path.join(BUILD, "sbx")
SBXD = os.path.join(BUILD, "sbxd")
WS = "/mnt/user-data/workspace"
CG_ROOT = "/sys/fs/cgroup"


def sanitized_build():
    """True for a -DSBX_SANITIZE=ON build (sbx-init linked against ASan)."""
    try:
        with open(os.path.join(BUILD, "sbx-init"), "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


SANITIZED = sanitized_build()
if SANITIZED:
    # ASan installs handlers for SIGSEGV, SIGBUS, SIGFPE and SIGILL in sbx-init, and a signal with
    # a handler reaches a pid namespace's init even from inside: PID 1 would be killable there
    # only because of the instrumentation. Keep the release build's behaviour, and a small
    # quarantine so that sbx-init's memory stays within the lowered limits of these tests.
    opts = os.environ.get("ASAN_OPTIONS", "")
    os.environ["ASAN_OPTIONS"] = ":".join(filter(None, [
        opts, "handle_segv=0", "handle_sigbus=0", "handle_sigfpe=0", "handle_sigill=0",
        "quarantine_size_mb=16"]))


def _load_integration_conftest():
    """The integration suite's conftest, under a name of its own (both suites may be collected
    in one pytest run, where the bare name `conftest` belongs to whichever was loaded last)."""
    name = "sbx_integration_conftest"
    path = os.path.join(SOURCE, "tests", "integration", "conftest.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_integ = _load_integration_conftest()
_integ.SBX = SBX  # the same binaries for both suites
Sbx = _integ.Sbx
thread_dir = _integ.thread_dir
on_a_terminal = _integ.on_a_terminal


def new_thread(prefix="sec"):
    """A thread id nobody else uses (sandbox ids are derived from the scope, and other suites
    may run on this host at the same time)."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


def write_config(path, **sandbox):
    lines = ["sandbox:"]
    for k, v in sandbox.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append("  %s: %s" % (k, v))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def parse_results(text):
    """`NAME RESULT` lines of the probe into a dict."""
    out = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            out[parts[0]] = parts[1].strip()
    return out


def sandbox_info(sbx, thread, user="default"):
    for s in sbx.ps():
        if s.get("thread") == thread and s.get("user") == user:
            return s
    return None


def sandbox_pid(sbx, thread):
    info = sandbox_info(sbx, thread)
    return info["pid"] if info else None


def sbx_cgroup_dirs(sandbox_id=None):
    """Every sandbox cgroup directory on the host (v1: one per controller, below the creator's
    own cgroup; v2: /sys/fs/cgroup/sbx), optionally only those of one sandbox id."""
    found = []
    for top, dirs, _ in os.walk(CG_ROOT):
        depth = top[len(CG_ROOT):].count("/")
        if os.path.basename(top) == "sbx":
            for d in dirs:
                if sandbox_id is None or d.startswith(sandbox_id + "-"):
                    found.append(os.path.join(top, d))
            dirs[:] = []
            continue
        if depth >= 4:
            dirs[:] = []
    return sorted(found)


def cgroup_procs(path):
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def host_mounts_mentioning(text):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if text in l]


def procs_with_cmdline(marker):
    """Host pids whose command line contains marker."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        return data[data.rindex(")") + 2]
    except (OSError, ValueError):
        return None


def wait_gone(pid, timeout=20.0):
    """True once pid no longer exists (reaped). A zombie still exists: the host's init reaps
    it, on this machine within a second or two."""
    end = time.time() + timeout
    while time.time() < end:
        if proc_state(pid) is None:
            return True
        time.sleep(0.1)
    return False


def mem_available_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def file_nr():
    with open("/proc/sys/fs/file-nr") as f:
        return int(f.read().split()[0])


def nr_procs():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


class Prober:
    """The static probe, uploaded into a sandbox with `sbx upload` and run from the workspace."""

    def __init__(self, sbx, binary):
        self.sbx = sbx
        self.binary = binary
        self.ready = set()

    def install(self, thread):
        if thread in self.ready:
            return
        with open(self.binary, "rb") as f:
            self.sbx.run("upload", "-t", thread, WS + "/probe", input=f.read(), check=0)
        r = self.sbx.sh(thread, "chmod 755 %s/probe && echo ok" % WS)
        assert r["stdout"].strip() == "ok", r
        self.ready.add(thread)

    def run(self, thread, *args, timeout=60, exec_timeout=None):
        """Runs the probe; returns (results dict, exec result)."""
        self.install(thread)
        cmd = " ".join([WS + "/probe"] + [str(a) for a in args])
        extra = ["--timeout", str(exec_timeout)] if exec_timeout else []
        p = self.sbx.run("exec", "-t", thread, *extra, "--json", "--", cmd, timeout=timeout)
        assert p.stdout, p.stderr
        r = json.loads(p.stdout)
        return parse_results(r["stdout"]), r


class Heartbeat:
    """Runs `echo ok` in a neighbour sandbox every interval seconds in the background and keeps
    every latency: a sandbox under attack must not stop its neighbours from serving."""

    def __init__(self, sbx, thread, interval=0.5, timeout=60):
        self.sbx, self.thread, self.interval, self.timeout = sbx, thread, interval, timeout
        self.latencies, self.failures = [], []
        self.min_mem = mem_available_kib()
        self.max_procs = nr_procs()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                p = self.sbx.run("exec", "-t", self.thread, "--", "echo ok", timeout=self.timeout)
                dt = time.monotonic() - t0
                if p.returncode != 0 or p.stdout.strip() != b"ok":
                    self.failures.append((dt, p.returncode, p.stderr[-300:]))
                else:
                    self.latencies.append(dt)
            except subprocess.TimeoutExpired:
                self.failures.append((self.timeout, "timeout", b""))
            self.min_mem = min(self.min_mem, mem_available_kib())
            self.max_procs = max(self.max_procs, nr_procs())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(self.timeout + 5)

    def check(self, max_latency=5.0, min_samples=1):
        assert not self.failures, "neighbour sandbox failed during the attack: %r" % self.failures
        assert len(self.latencies) >= min_samples, "neighbour was never answered"
        assert max(self.latencies) < max_latency, "neighbour too slow: %r" % self.latencies
        print("neighbour: %d answers, max %.3f s, host MemAvailable min %d MiB"
              % (len(self.latencies), max(self.latencies), self.min_mem // 1024))


def spawn_cli(sbx, *args, **kw):
    """sbx in the background (Popen)."""
    return subprocess.Popen(sbx.cmd(*args), **kw)


def leftover_tmp_files(folder):
    """Temporary files of interrupted atomic writes left in a host folder."""
    return [n for n in os.listdir(folder) if re.search(r"\.sbx-[0-9a-f]+\.tmp$", n)]


def glob_host(pattern):
    return glob.glob(pattern)
