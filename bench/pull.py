#!/usr/bin/env python3
"""Pull figures (docs/images.md, "Pull"): `sbx pull` of a multi-layer ~100 MB image from a
docker-registry on loopback against `skopeo copy docker://... oci:...` (fetch only, nothing
unpacked) and `podman pull` (fetch and unpack, when podman is installed), interleaved
(round-robin), each from an empty store. The image comes from tests/images/mkimage.py
(busybox-static plus four 25 MB random files), pushed once by skopeo.

    python3 bench/pull.py [BUILD_DIR] [--rounds N] [--baseline OTHER_BUILD_DIR]
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
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import mkimage  # noqa: E402
from test_pull import Registry  # noqa: E402


def timed(argv):
    t = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", help="another build dir whose sbx pull runs alongside")
    a = ap.parse_args()
    sbx = os.path.join(os.path.abspath(a.build), "sbx")
    tmp = tempfile.mkdtemp(prefix="sbx-bench-pull-")
    reg = None
    try:
        layers = [mkimage.busybox_layer()] + [mkimage.layer([("f%d" % i, os.urandom(25 << 20))])
                                              for i in range(4)]
        lay = os.path.join(tmp, "layout")
        mkimage.build_oci(lay, [("big", layers, None)], as_dir=True)
        reg = Registry(tmp)
        reg.push(lay, "bench/big:1")
        ref = reg.host + "/bench/big:1"
        podman = shutil.which("podman")
        res = {"sbx pull": [], "skopeo copy": []}
        if podman:
            res["podman pull"] = []
        if a.baseline:
            res["sbx baseline"] = []
        for r in range(a.rounds + 1):  # round 0: warm-up, discarded
            for name in res:
                d = os.path.join(tmp, "run")
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                if name == "sbx pull":
                    argv = [sbx, "--home", d, "pull", "-q", ref]
                elif name == "sbx baseline":
                    argv = [os.path.join(os.path.abspath(a.baseline), "sbx"), "--home", d,
                            "pull", "-q", ref]
                elif name == "skopeo copy":
                    argv = ["skopeo", "copy", "-q", "--src-tls-verify=false", "docker://" + ref,
                            "oci:%s/oci:x" % d]
                else:
                    argv = [podman, "--root", d + "/root", "--runroot", d + "/run",
                            "--storage-driver", "overlay", "pull", "-q", "--tls-verify=false",
                            ref]
                s = timed(argv)
                if r:
                    res[name].append(s)
        print("pull of a 5-layer %.0f MB image from docker-registry on loopback, %d rounds:" %
              (sum(len(x) for x in layers) / 1e6, a.rounds))
        for name, v in res.items():
            print("  %-12s median %.2f s  (min %.2f, max %.2f)" %
                  (name, statistics.median(v), min(v), max(v)))
    finally:
        if reg:
            reg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
