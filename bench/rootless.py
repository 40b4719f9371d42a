#!/usr/bin/env python3
"""Rootless next to root: cold start (`sbx run -- true`: create, run, destroy) and warm exec
(`sbx exec -t T -- true` on a parked sandbox), the same binaries, as root and as an ordinary
user (made here with useradd and removed at the end, with Debian's default subordinate ids, so
the rootless launcher runs newuidmap/newgidmap as it would for such a user).

    bench/rootless.py [BUILD_DIR] [ROUNDS]      (as root; writes bench/rootless-notes.md)

Each case runs in a timing helper of its own that is already that user (so setpriv's own start
is not timed); the cases are interleaved, one sample each per round, the first case rotating,
after two warm-up rounds. Medians with p10 and p90, in ms."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HELPER = r"""
import subprocess, sys, time
for line in sys.stdin:
    argv = line.split("\0")
    t = time.monotonic_ns()
    rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    print(time.monotonic_ns() - t, rc, flush=True)
"""


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    if os.geteuid() != 0:
        sys.exit("bench/rootless.py: run as root (it makes the test user)")
    work = tempfile.mkdtemp(prefix="sbx-bench-rootless-", dir="/tmp")
    os.chmod(work, 0o755)
    for b in ("sbx", "sbx-init"):
        shutil.copy2(os.path.join(build, b), os.path.join(work, b))
    name = "sbxbn" + uuid.uuid4().hex[:6]
    single = "sbxbs" + uuid.uuid4().hex[:6]  # no subordinate ids: the single mapping
    subprocess.run(["useradd", "-m", name], check=True)
    subprocess.run(["useradd", "-m", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", single],
                   check=True)
    uid = int(subprocess.check_output(["id", "-u", name]))
    suid = int(subprocess.check_output(["id", "-u", single]))
    udir = "/home/" + name
    sdir = "/home/" + single
    helpers = {}
    try:
        sbx = os.path.join(work, "sbx")
        homes = {"root": os.path.join(work, "root-home"), "user": os.path.join(udir, "state"),
                 "single": os.path.join(sdir, "state")}
        quiet = os.path.join(work, "quiet.yaml")  # the warning (no delegated cgroup) off stderr
        with open(quiet, "w") as f:
            f.write("sandbox:\n  cgroup_required: false\n")
        os.chmod(quiet, 0o644)
        for who, u, d in (("root", 0, None), ("user", uid, udir), ("single", suid, sdir)):
            pre = [] if who == "root" else ["setpriv", "--reuid=%d" % u, "--regid=%d" % u,
                                              "--init-groups", "env", "HOME=" + d]
            helpers[who] = subprocess.Popen(pre + ["/usr/bin/python3", "-c", HELPER],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True, cwd="/tmp")
        base = {w: [sbx, "--home", homes[w], "--config", quiet] for w in homes}
        cases = {
            "cold-root": ("root", base["root"] + ["run", "--", "true"]),
            "cold-user": ("user", base["user"] + ["run", "--", "true"]),
            "cold-user-single": ("single", base["single"] + ["run", "--", "true"]),
            "warm-root": ("root", base["root"] + ["exec", "-t", "w", "--", "true"]),
            "warm-user": ("user", base["user"] + ["exec", "-t", "w", "--", "true"]),
        }
        samples = {c: [] for c in cases}
        failed = {c: 0 for c in cases}

        def once(case):
            who, argv = cases[case]
            h = helpers[who]
            h.stdin.write("\0".join(argv) + "\n")
            h.stdin.flush()
            ns, rc = h.stdout.readline().split()
            return int(ns) / 1e6, int(rc)

        names = list(cases)
        for r in range(rounds + 2):
            k = r % len(names)
            for case in names[k:] + names[:k]:
                ms, rc = once(case)
                if r < 2:
                    continue
                if rc != 0:
                    failed[case] += 1
                else:
                    samples[case].append(ms)
        load = open("/proc/loadavg").read().split()[:3]
        sub = [l.strip() for l in open("/etc/subuid") if l.startswith(name + ":")]
        res = {c: {"median": pct(v, 0.5), "p10": pct(v, 0.1), "p90": pct(v, 0.9), "n": len(v),
                   "failed": failed[c]} for c, v in samples.items() if v}
        print(json.dumps(res, indent=1))
        rev = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                              "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        what = {
            "cold-root": "`sbx run -- true` as root",
            "cold-user": "`sbx run -- true` as an ordinary user (rootless: newuidmap, newgidmap)",
            "cold-user-single": "the same as a user without subordinate ids (the single "
                                "mapping, written by the launcher itself)",
            "warm-root": "`sbx exec -t w -- true` as root, the sandbox warm",
            "warm-user": "`sbx exec -t w -- true` as the user, the sandbox warm",
        }
        out = ["### Rootless next to root", "",
               "Measured by `bench/rootless.py` (sbx %s, %s, %d rounds, 1-minute load %s at "
               "the end; not part of `bench/run.sh`): the same binaries as root and as an "
               "ordinary user with subordinate ids (`%s`), interleaved, each case in a timing "
               "helper that already is its user. Root's sandboxes get their cgroups (v1 here); "
               "the users' none (this hybrid host delegates none to a user: "
               "`cgroup_required: false` keeps the warning off)." % (rev or "?", time.strftime("%Y-%m-%d"), rounds, load[0],
                                   sub[0] if sub else "none"), "",
               "| case | median ms | p10 | p90 | n | failed | what it is |",
               "|---|---:|---:|---:|---:|---:|---|"]
        for c in names:
            if c in res:
                x = res[c]
                out.append("| %s | %.2f | %.2f | %.2f | %d | %d | %s |" % (
                    c, x["median"], x["p10"], x["p90"], x["n"], x["failed"], what[c]))
        if "cold-root" in res and "cold-user" in res:
            out += ["", "Rootless cold start is %.2f× root's with subordinate ids (the launcher "
                    "runs two setuid helpers, newuidmap and newgidmap, to write the maps) and "
                    "%.2f× with the single mapping; warm exec %.2f× (the same path once the "
                    "sandbox runs: the difference is noise or the cgroup). The 1-minute load was "
                    "%s at the end: the ratios are the figures to read, not the times." % (
                        res["cold-user"]["median"] / res["cold-root"]["median"],
                        res["cold-user-single"]["median"] / res["cold-root"]["median"],
                        res["warm-user"]["median"] / res["warm-root"]["median"], load[0])]
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rootless-notes.md"),
                  "w") as f:
            f.write("\n".join(out) + "\n")
    finally:
        for h in helpers.values():
            h.stdin.close()
            h.wait()
        for w, h in (("root", os.path.join(work, "root-home")),):
            subprocess.run([os.path.join(work, "sbx"), "--home", h, "down"], capture_output=True)
        subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--init-groups",
                        os.path.join(work, "sbx"), "--home", udir + "/state", "down"],
                       capture_output=True)
        subprocess.run(["setpriv", "--reuid=%d" % suid, "--regid=%d" % suid, "--init-groups",
                        os.path.join(work, "sbx"), "--home", sdir + "/state", "down"],
                       capture_output=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        subprocess.run(["userdel", "-r", single], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
