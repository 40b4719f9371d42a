#!/usr/bin/python3
"""Memory per idle sandbox, at several sandbox counts.

    density.py bwrap OUT "100 1000" -- BWRAP_ARGV...    starts BWRAP_ARGV (e.g. bwrap ... sleep
                                                       infinity) until COUNT are running
    density.py sbx OUT "100 1000" -- SBXBENCH SBX HOME CONFIG
                                                       creates the scopes (bench, d<k>) until COUNT
                                                       warm sandboxes exist, and leaves them up

At each count it measures, against a baseline read before the first sandbox:
  - the PSS and RSS of every process of the sandboxes (smaps_rollup of each sandbox's root
    process and all its descendants),
  - the deltas of MemAvailable, Slab, SUnreclaim, PageTables, KernelStack, Percpu and Shmem
    (/proc/meminfo), after waiting for the kernel to finish freeing earlier work.
Rows "KIND COUNT METRIC VALUE" are appended to OUT (kibibytes, seconds, counts).
Other work on the machine moves the /proc/meminfo deltas; PSS is exact for our processes.
"""
import json
import os
import signal
import subprocess
import sys
import time

FIELDS = ("MemAvailable", "Slab", "SUnreclaim", "PageTables", "KernelStack", "Percpu", "Shmem")


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in FIELDS:
                out[k] = int(v.split()[0])
    return out


def meminfo_avg(n=3, gap=0.3):
    acc = {k: 0 for k in FIELDS}
    for i in range(n):
        m = meminfo()
        for k in FIELDS:
            acc[k] += m[k]
        if i + 1 < n:
            time.sleep(gap)
    return {k: acc[k] / n for k in FIELDS}


def settle():
    """Waits until the kernel stops freeing memory from earlier work (a torn-down network
    namespace is freed by a workqueue, after the processes are gone): Slab and MemAvailable
    must stay within 4 MiB over 1 s, for at most $DENSITY_SETTLE_S seconds (default 15)."""
    end = time.monotonic() + float(os.environ.get("DENSITY_SETTLE_S", "15"))
    prev = meminfo()
    while time.monotonic() < end:
        time.sleep(1.0)
        cur = meminfo()
        if abs(cur["Slab"] - prev["Slab"]) < 4096 and \
                abs(cur["MemAvailable"] - prev["MemAvailable"]) < 4096:
            return
        prev = cur


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(roots, kids):
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rollup(pid):
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def measure(kind, count, roots, base, out, start_s):
    time.sleep(1.0)  # let RCU-freed objects and lazy frees settle
    m = meminfo_avg()
    procs = tree(roots, children_map())
    pss = rss = 0
    for p in procs:
        a, b = rollup(p)
        pss += a
        rss += b
    rows = {
        "sandboxes": len(roots),
        "procs": len(procs),
        "pss_kib": pss,
        "rss_kib": rss,
        "start_s": round(start_s, 3),
    }
    for k in FIELDS:
        d = m[k] - base[k]
        rows["d_" + k.lower() + "_kib"] = round(-d if k == "MemAvailable" else d, 1)
    with open(out, "a") as f:
        for k, v in rows.items():
            f.write(f"{kind}\t{count}\t{k}\t{v}\n")
    per = lambda v: v / max(1, len(roots)) / 1024
    print(f"density {kind} x{count}: procs {len(procs)}; per sandbox: PSS {per(pss):.2f} MiB, "
          f"MemAvailable drop {per(rows['d_memavailable_kib']):.2f} MiB, "
          f"slab {per(rows['d_slab_kib']):+.2f} MiB; started in {start_s:.1f} s", flush=True)


def run_bwrap(out, counts, argv):
    settle()
    base = meminfo_avg()
    started = []
    try:
        for count in counts:
            t0 = time.monotonic()
            while len(started) < count:
                started.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))
            # running = its payload process (the last name in argv's command) exists
            payload = os.path.basename(argv[-2] if argv[-1] == "infinity" else argv[-1])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                kids = children_map()
                ready = 0
                for p in started:
                    for q in tree([p.pid], kids):
                        try:
                            with open(f"/proc/{q}/comm") as f:
                                if f.read().strip() == payload:
                                    ready += 1
                                    break
                        except OSError:
                            pass
                if ready == len(started):
                    break
                time.sleep(0.1)
            measure("bwrap", count, [p.pid for p in started], base, out, time.monotonic() - t0)
    finally:
        for p in started:
            try:
                p.send_signal(signal.SIGKILL)
            except OSError:
                pass
        for p in started:
            p.wait()


def run_sbx(out, counts, sbxbench, sbx, home, config):
    settle()
    base = meminfo_avg()
    have = 0
    for count in counts:
        t0 = time.monotonic()
        subprocess.run([sbxbench, "populate", home, config, "bench", "d", str(have), str(count),
                        "2"], check=True, stdout=subprocess.DEVNULL)
        start_s = time.monotonic() - t0
        have = count
        ps = json.loads(subprocess.run([sbx, "--home", home, "--config", config, "ps", "--json"],
                                       check=True, capture_output=True, text=True).stdout)
        roots = [s["pid"] for s in ps["sandboxes"]
                 if s.get("user") == "bench" and (s.get("thread") or "").startswith("d")
                 and s["pid"] > 0]
        measure("sbx", count, roots, base, out, start_s)


def main():
    kind, out, counts = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3].split()]
    rest = sys.argv[sys.argv.index("--") + 1:]
    if kind == "bwrap":
        run_bwrap(out, counts, rest)
    elif kind == "sbx":
        run_sbx(out, counts, *rest)
    else:
        sys.exit(f"unknown kind {kind}")


if __name__ == "__main__":
    main()
