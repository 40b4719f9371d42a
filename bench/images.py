#!/usr/bin/env python3
"""Image figures (docs/images.md, bench/README.md "Images"): cold start of `sbx run -- true` from
a cached image against `host`, interleaved in one run (round-robin, warm-up discarded); import
of a ~100 MB image; the disk 100 sandboxes of one image add. Images come from
tests/images/mkimage.py (busybox-static plus random files), offline.

    python3 bench/images.py [BUILD_DIR] [--rounds N] [--sandboxes N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "images"))
import mkimage  # noqa: E402


def du(path):
    out = subprocess.run(["du", "-sk", "--apparent-size", path], capture_output=True, text=True)
    return int(out.stdout.split()[0]) * 1024 if out.returncode == 0 else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sandboxes", type=int, default=100)
    a = ap.parse_args()
    sbx = os.path.abspath(os.path.join(a.build, "sbx"))
    work = tempfile.mkdtemp(prefix="sbx-bench-img-")
    home = os.path.join(work, "home")
    try:
        big = mkimage.layer([("data/f%d" % i, os.urandom(4 << 20)) for i in range(24)])
        arch = os.path.join(work, "big.tar")
        mkimage.build_docker(arch, [("big:1", [mkimage.busybox_layer(), big], None)])
        size = os.path.getsize(arch)
        t = time.monotonic()
        subprocess.run([sbx, "--home", home, "image", "import", arch], check=True,
                       capture_output=True)
        imp = time.monotonic() - t
        t = time.monotonic()
        subprocess.run([sbx, "--home", home, "image", "import", arch], check=True,
                       capture_output=True)
        reimp = time.monotonic() - t
        print("import of a %.0f MB docker-archive: %.2f s (again, layers cached: %.2f s)"
              % (size / 1e6, imp, reimp))

        # the cold start: `sbx exec` on a new scope (the sandbox is created and stays warm);
        # and `sbx run`, which also destroys it (the upper goes with it)
        for verb in ("exec", "run"):
            def case(image, r):
                scope = ["-t", "%s-%s-%d" % (verb, "img" if image else "host", r)] if verb == "exec" else []
                return [sbx, "--home", home, verb] + scope + \
                    (["--image", image] if image else []) + ["--", "true"]
            times = {"host": [], "image": []}
            for r in range(a.rounds + 3):
                order = ["host", "image"] if r % 2 else ["image", "host"]
                for k in order:
                    cmd = case("big:1" if k == "image" else None, r)
                    t = time.monotonic()
                    subprocess.run(cmd, check=True, capture_output=True)
                    if r >= 3:
                        times[k].append(time.monotonic() - t)
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            for k in ("host", "image"):
                v = sorted(times[k])
                print("sbx %s -- true, %-5s: median %.2f ms (p10 %.2f, p90 %.2f), %d rounds" % (
                    verb, k, med[k], v[len(v) // 10] * 1000, v[len(v) * 9 // 10] * 1000, len(v)))
            print("sbx %s: image / host %.2fx" % (verb, med["image"] / med["host"]))
            subprocess.run([sbx, "--home", home, "down"], capture_output=True, timeout=600)

        layers = du(os.path.join(home, "images", "layers"))
        before = du(os.path.join(home, "sandboxes")) if os.path.isdir(os.path.join(home, "sandboxes")) else 0
        for i in range(a.sandboxes):
            subprocess.run([sbx, "--home", home, "exec", "-t", "d%d" % i, "--image", "big:1", "--",
                            "echo x > /root/mark"], check=True, capture_output=True)
        after = du(os.path.join(home, "sandboxes"))
        uppers = sum(du(os.path.join(home, "sandboxes", d, "upper"))
                     for d in os.listdir(os.path.join(home, "sandboxes")))
        print("disk: layers %.1f MB once; %d sandboxes add %.2f MB in all (%.1f KB each; uppers "
              "%.1f KB each)" % (layers / 1e6, a.sandboxes, (after - before) / 1e6,
                                 (after - before) / a.sandboxes / 1e3, uppers / a.sandboxes / 1e3))
    finally:
        subprocess.run([sbx, "--home", home, "down"], capture_output=True, timeout=600)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
