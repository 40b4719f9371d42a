#!/usr/bin/env python3
"""Keystroke round trip through a terminal: write one byte to the terminal a front-end runs on,
read its echo back. The program at the far end is `cat` on a terminal in raw mode (so each byte
is read and written back by a process, as an editor or a REPL would), started by:

  sbx      sbx exec --tty -t THREAD -- 'stty raw -echo; cat'   (the sandbox's terminal)
  script   script -qfc 'stty raw -echo; cat' /dev/null         (a local pty: the floor)
  docker   docker exec -it CONTAINER sh -c 'stty raw -echo; cat'   (when BENCH_DOCKER names one)
  podman   the same with podman (BENCH_PODMAN)

Cases are interleaved byte by byte (round-robin), so load on the machine hits them alike.
Usage: bench/keystroke.py [--build DIR] [--rounds N] [--json]; prints p50/p90/p99 in ms."""
import argparse
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INNER = "stty raw -echo; cat"


def spawn(argv):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    return pid, fd


def roundtrip(fd, byte, timeout=5.0):
    t0 = time.perf_counter_ns()
    os.write(fd, byte)
    deadline = time.time() + timeout
    seen = b""
    while byte not in seen:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not r:
            raise TimeoutError("no echo")
        seen += os.read(fd, 4096)
    return (time.perf_counter_ns() - t0) / 1e6


def ready(fd, timeout=30.0):
    """Sends a byte until it comes back (the far end is up and in raw mode), then drains."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            roundtrip(fd, b"r", timeout=0.5)
            break
        except TimeoutError:
            continue
    else:
        raise TimeoutError("the far end never echoed")
    time.sleep(0.2)
    while select.select([fd], [], [], 0.05)[0]:
        os.read(fd, 65536)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sbx-keystroke-")
    sbx = [os.path.join(a.build, "sbx"), "--home", home]
    subprocess.run(sbx + ["exec", "-t", "ks", "--", "true"], check=True)
    cases = {"sbx exec --tty": sbx + ["exec", "-t", "ks", "--tty", "--", INNER]}
    if shutil.which("script"):
        cases["script (local pty)"] = ["script", "-qfc", INNER, "/dev/null"]
    for tool in ("docker", "podman"):
        name = os.environ.get("BENCH_" + tool.upper())
        if name and shutil.which(tool):
            cases[tool + " exec -it"] = [tool, "exec", "-it", name, "sh", "-c", INNER]
    procs = {}
    try:
        for k, argv in cases.items():
            procs[k] = spawn(argv)
            ready(procs[k][1])
        samples = {k: [] for k in cases}
        names = list(cases)
        for i in range(a.rounds):
            for j in range(len(names)):
                k = names[(i + j) % len(names)]
                samples[k].append(roundtrip(procs[k][1], b"abcdefghij"[i % 10:i % 10 + 1]))
    finally:
        for pid, fd in procs.values():
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(fd)
        subprocess.run(sbx + ["down"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    res = {k: {"n": len(v), "p50_ms": pct(v, 50), "p90_ms": pct(v, 90), "p99_ms": pct(v, 99)}
           for k, v in samples.items()}
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print("| front-end | n | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|")
        for k, r in res.items():
            print("| %s | %d | %.3f | %.3f | %.3f |" % (k, r["n"], r["p50_ms"], r["p90_ms"],
                                                      r["p99_ms"]))


if __name__ == "__main__":
    sys.exit(main())
