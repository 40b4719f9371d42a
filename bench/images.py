#!/usr/bin/env python3
"""Image figures (docs/images.md, bench/README.md "Images"): cold start of `sbx run -- true` from
a cached image against `host`, interleaved in one run (round-robin, warm-up discarded); import
of a ~100 MB image; the disk 100 sandboxes of one image add. Images come from
tests/images/mkimage.py (busybox-static plus random files), offline.

    python3 bench/images.py [BUILD_DIR] [--rounds N] [--sandboxes N] [--compare]
                            [--docker-host unix:///PATH]

--compare also loads the same archive with `podman load` and `docker load` (a daemon at
--docker-host, else docker's default; see bench/README.md for one started with no bridge and no
iptables) and, round by round with sbx, `podman run --rm IMAGE /bin/sh -c true` and `docker run
--rm ...`; a tool that is missing or cannot run a container here is reported, not fatal.
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


def timed(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.monotonic() - t, p


def compare_tools(a, arch):
    """`podman load` / `docker load` of the archive (image dropped first, so its layers are
    unpacked again), and the run commands of those that can start a container here."""
    runs = {}
    docker = ["docker"] + (["-H", a.docker_host] if a.docker_host else [])
    # ulimits below this machine's hard limits: the runtimes' defaults (nofile 1048576) are
    # refused here without CAP_SYS_RESOURCE; --network none: no bridge, no iptables
    opts = ["--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit",
            "nproc=1024:1024"]
    for name, tool, ref in (("podman", ["podman"], "localhost/big:1"), ("docker", docker, "big:1")):
        if shutil.which(tool[0]) is None:
            print("%s: not installed" % name)
            continue
        subprocess.run(tool + ["rmi", "-f", ref], capture_output=True)
        t, p = timed(tool + ["load", "-q", "-i", arch])
        if p.returncode != 0:
            print("%s load: failed: %s" % (name, (p.stderr or p.stdout).strip()[-300:]))
            continue
        print("%s load of the same archive: %.2f s" % (name, t))
        cmd = tool + ["run"] + opts + [ref, "/bin/sh", "-c", "true"]
        t, p = timed(cmd)
        if p.returncode != 0:
            print("%s run: cannot run a container here: %s" % (name, p.stderr.strip()[-300:]))
            continue
        runs[name + " run"] = cmd
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sandboxes", type=int, default=100)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--docker-host", default=None)
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
        others = compare_tools(a, arch) if a.compare else {}

        # the cold start: `sbx exec` on a new scope (the sandbox is created and stays warm);
        # and `sbx run`, which also destroys it (the upper goes with it)
        for verb in ("exec", "run"):
            def case(image, r):
                scope = ["-t", "%s-%s-%d" % (verb, "img" if image else "host", r)] if verb == "exec" else []
                return [sbx, "--home", home, verb] + scope + \
                    (["--image", image] if image else []) + ["--", "true"]
            times = {"host": [], "image": []}
            if verb == "run":
                times.update({k: [] for k in others})
            for r in range(a.rounds + 3):
                order = ["host", "image"] if r % 2 else ["image", "host"]
                for k in order + (list(others) if verb == "run" else []):
                    cmd = others[k] if k in others else case("big:1" if k == "image" else None, r)
                    t = time.monotonic()
                    subprocess.run(cmd, check=True, capture_output=True)
                    if r >= 3:
                        times[k].append(time.monotonic() - t)
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            for k in times:
                v = sorted(times[k])
                print("%s %s -- true, %-5s: median %.2f ms (p10 %.2f, p90 %.2f), %d rounds" % (
                    "sbx" if k in ("host", "image") else "", verb, k, med[k],
                    v[len(v) // 10] * 1000, v[len(v) * 9 // 10] * 1000, len(v)))
            print("sbx %s: image / host %.2fx" % (verb, med["image"] / med["host"]))
            for k in others if verb == "run" else ():
                print("%s / sbx image %.2fx" % (k, med[k] / med["image"]))
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
