#!/usr/bin/env python3
"""Commit figures (docs/images.md, "Snapshots"): `sbx commit` of a sandbox whose upper holds
50 MB (one 50 MiB file of random bytes, or 5,000 files of 10 KiB), timed; while it runs, the
committed sandbox itself records /proc/uptime every millisecond (its longest gap is how long it
was frozen, at 10 ms resolution) and another sandbox answers `sbx exec -- true` in a loop (its
slowest answer: commit must not stall it). The image is busybox-static (tests/images/mkimage.py).

    python3 bench/commit.py [BUILD_DIR] [--rounds N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "images"))
import mkimage  # noqa: E402

TICKER = ("rm -f /ticks; while :; do read up _ < /proc/uptime; echo $up >> /ticks; "
          "usleep 1000; done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    sbx = os.path.join(os.path.abspath(a.build), "sbx")
    tmp = tempfile.mkdtemp(prefix="sbx-bench-commit-")
    home = os.path.join(tmp, "home")

    def run(*args, check=True):
        p = subprocess.run([sbx, "--home", home] + list(args), capture_output=True, timeout=600)
        if check and p.returncode != 0:
            raise SystemExit("sbx %s: %s" % (" ".join(args), p.stderr.decode()))
        return p

    try:
        tar = os.path.join(tmp, "bb.tar")
        mkimage.build_docker(tar, [("busybox:bench", [mkimage.busybox_layer()], None)])
        run("image", "import", tar)
        cases = {
            "one 50 MiB file": "dd if=/dev/urandom of=/blob bs=1M count=50 2>/dev/null",
            "5000 files of 10 KiB": "mkdir -p /many && cd /many && dd if=/dev/urandom of=/s "
                                    "bs=10240 count=1 2>/dev/null && for i in $(seq 1 5000); "
                                    "do cp /s f$i; done && rm /s",
        }
        run("exec", "-t", "other", "--image", "busybox:bench", "--", "true")
        print("| upper | commit median (min-max) | frozen, longest gap seen inside | "
              "other sandbox's slowest `exec true` during commits |")
        print("|---|---|---|---|")
        for ci, (name, fill) in enumerate(cases.items()):
            t = "src%d" % ci
            run("exec", "-t", t, "--image", "busybox:bench", "--", fill)
            ticker = subprocess.Popen([sbx, "--home", home, "exec", "-t", t, "--", TICKER],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            times, lat = [], []
            for r in range(a.rounds + 1):  # round 0: warm-up, discarded
                done = threading.Event()

                def other():
                    while not done.is_set():
                        t0 = time.monotonic()
                        run("exec", "-t", "other", "--", "true")
                        lat.append(time.monotonic() - t0)

                th = threading.Thread(target=other)
                th.start()
                t0 = time.monotonic()
                run("commit", "-t", t, "bench:%d-%d" % (ci, r))
                el = time.monotonic() - t0
                done.set()
                th.join()
                if r:
                    times.append(el)
                run("rmi", "bench:%d-%d" % (ci, r))
            ticker.kill()
            ticker.wait()
            ticks = [float(x) for x in run("exec", "-t", t, "--", "cat /ticks").stdout.split()]
            gap = max(b - c for b, c in zip(ticks[1:], ticks[:-1])) if len(ticks) > 1 else 0
            print("| %s | %.0f ms (%.0f-%.0f) | %.0f ms | %.0f ms |" % (
                name, statistics.median(times) * 1000, min(times) * 1000,
                max(times) * 1000, gap * 1000, max(lat) * 1000 if lat else 0))
            run("rm", "-t", t)
    finally:
        subprocess.run([sbx, "--home", home, "down"], capture_output=True, timeout=300)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
