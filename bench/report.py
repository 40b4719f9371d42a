#!/usr/bin/python3
"""Writes bench/README.md and bench/plots/*.png from the results of the last run.

    report.py RESULTS BENCH_DIR
    report.py --strace-top STRACE_FILE OUT   (used by profile.sh: condenses a strace -f -y -T
                                              log to its longest syscalls, with process names)
    report.py --trace-summary PERF_TRACE_S OUT RUNS   (used by profile.sh: sums perf trace -s
                                              output per process name and syscall)
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict, defaultdict

# ---------------------------------------------------------------------------------------------
# what each group and case measures (the README's words)

GROUPS = OrderedDict([
    ("cold", ("Cold start",
              "A new sandbox runs `true` and is gone: each sample is one whole create, run, "
              "destroy.")),
    ("cold-idle", ("Cold start after an idle pause",
                   "The same cases with a pause of {pause} ms (not timed) before every run. "
                   "Back to back, a sandbox start finds the kernel's cgroup attach lock "
                   "(cgroup_threadgroup_rwsem) still in its fast state from the previous run; "
                   "after a pause, as between an agent's calls, moving the new sandbox into its "
                   "cgroups waits for an RCU grace period (see Profiles). bwrap and unshare use "
                   "no cgroups; crun does.")),
    ("first", ("First command in a new scope",
               "`acquire` of a (user, thread) scope that has no sandbox yet creates it, then "
               "`true` runs in it (timed); destroying it afterwards is not timed. A pause of "
               "{pause} ms (not timed) precedes every run.")),
    ("warm", ("Warm exec", "`true` in a sandbox that is already running.")),
    ("file-4k", ("Files: 4 KiB", "write_file and read_file of a 4 KiB text file.")),
    ("file-1m", ("Files: 1 MiB", "write_file and read_file of a 1 MiB text file.")),
    ("file-100m", ("Files: 100 MiB",
                   "write_file and read_file of a 100 MiB text file (read_file's maximum).")),
    ("list-2000", ("list_dir of 2,000 entries", "A directory of 2,000 empty files.")),
    ("glob", ("Search: glob",
              "`*.rs` (at most 200 results) over the generated tree. Few files match, so every "
              "approach walks the whole tree (sbx and the pruned peers skip node_modules and "
              ".git, which hold most of the files).")),
    ("grep", ("Search: grep",
              "`needle_7f3a`, case-insensitive extended regex, at most 100 matches: 3 lines in "
              "the project, 500 in node_modules.")),
])

CASES = {
    "floor": "fork + exec + wait of `/bin/true` from the harness: the process floor",
    "sbx-cli-run": "`sbx run -- true`: the CLI creates a throw-away sandbox (namespaces, rootfs, "
                   "cgroups, sbx-init as PID 1), runs `sh -lc true` in it and destroys it",
    "sbx-lib-run": "the same through libsbx inside the harness (sbx_acquire(NULL, NULL), "
                   "sbx_execute_command, sbx_destroy): no CLI process start",
    "sbx-cli-run-spares": "`sbx run -- true` with `spares: 2` (a home of its own): the CLI takes "
                          "a ready spare (rename + adoption) instead of launching; its detached "
                          "filler replaces it in the background, competing for the CPUs",
    "sbx-lib-run-spares": "the same through libsbx in-process, a thread of the harness refilling "
                          "the spares (as sbxd does)",
    "sbx-cli-first-spares": "`sbx exec -u bench -t csN -- true` with `spares: 2`: a new scope "
                            "takes a spare (its thread folder moved in), then runs `true`",
    "sbx-lib-first-spares": "sbx_acquire(bench, a new thread) + sbx_execute_command(`true`) "
                            "with `spares: 2`, refilled by a thread of the harness",
    "bwrap": "`bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all "
             "--die-with-parent /bin/true`",
    "unshare": "`unshare --user --map-root-user --mount --pid --fork --net --ipc --uts "
               "/bin/true`",
    "crun-run": "`crun run` of an OCI bundle (`crun spec` defaults: pid, net, ipc, uts, mount "
                "namespaces, read-only busybox-static rootfs, cgroupfs), in a private mount "
                "namespace without /sys/fs/cgroup/unified (crun refuses hybrid hosts otherwise)",
    "sbxd-cold": "sbxd (running with `spares: 2`) over HTTP: `POST /v1/sandboxes`, "
                 "`GET .../endpoints/44772`, `POST /command` (read to the terminal event), "
                 "`DELETE`",
    "sbx-cli-first": "`sbx exec -u bench -t cfN -- true`, a new thread every run (`sbx rm` "
                     "afterwards, untimed)",
    "sbx-lib-first": "sbx_acquire(bench, a new thread every run) + sbx_execute_command(`true`) "
                     "in-process (sbx_destroy afterwards, untimed)",
    "sbx-cli-exec": "`sbx exec -u bench -t warm-cli -- true`: the CLI starts, reclaims the "
                    "parked sandbox (lock, state, health check), runs `sh -lc true`, parks it",
    "sbx-cli-exec-skip": "the same with `health_check_skip_seconds: 2` (DeerFlow's key; "
                         "off by default): a sandbox used in the last 2 s is reclaimed after a "
                         "ping of its init instead of running `true`",
    "sbx-lib-cycle": "that cycle in-process: sbx_acquire (with its health check) + "
                     "sbx_execute_command + sbx_release",
    "sbx-lib-exec": "acquired once; then sbx_execute_command(`true`) per sample (`sh -lc true` "
                    "inside): the library's per-command cost",
    "sbx-lib-exec-argv": "the same with opts.argv = {\"/bin/true\"} (no shell)",
    "sbx-lib-exec-bash": "the same with opts.argv = {\"/bin/bash\", \"-c\", \"true\"}: what "
                         "sbxd's `POST /command` runs (`bash -c`, as OpenSandbox's execd does)",
    "nsenter-bwrap": "`nsenter -t PID -a /bin/true` into a running `bwrap --unshare-all` "
                     "sandbox",
    "crun-exec": "`crun exec` of `/bin/true` in a running crun container",
    "sbxd-exec": "`POST {execd}/command {\"command\":\"true\"}` on a sandbox made once, read to "
                 "the terminal event (one connection per command)",
    "sbx-cli-write": "`sbx write -u bench -t files PATH < SRC` (write_file: temporary file, "
                     "fsync, rename, inside the sandbox)",
    "sbx-lib-write": "sbx_write_file in-process",
    "host-write": "the same syscalls on the host in-process, no sandbox (open a temporary "
                  "file, write, fsync, rename): the floor",
    "dd-write": "`dd if=SRC of=DST bs=1M conv=fsync status=none`",
    "sbx-cli-read": "`sbx read -u bench -t files PATH` (read_file: checks UTF-8)",
    "sbx-lib-read": "sbx_read_file in-process",
    "host-read": "open + read into memory in-process, no sandbox: the floor",
    "cat-read": "`cat PATH`",
    "sbx-cli-ls": "`sbx ls -u bench -t files DIR` (list_dir: depth 2, sorted, ignore list)",
    "sbx-lib-ls": "sbx_list_dir(DIR, 2) in-process",
    "host-ls": "opendir/readdir + sort in-process, no sandbox",
    "gnu-ls": "`ls -1 -p DIR`",
    "seeds-busybox": "the seeds' remote approach: DeerFlow's command (see below) in `busybox "
                     "sh` with busybox find/grep/head; DeerFlow's Python filtering of the "
                     "output is not timed",
    "sbx-cli-glob": "`sbx glob -u bench -t search TREE '*.rs'`",
    "sbx-lib-glob": "sbx_glob in-process",
    "gnu-find": "`find TREE -name node_modules -prune -o -name .git -prune -o -type f -name "
                "'*.rs' -print` (the same answer)",
    "gnu-find-all": "`find TREE -type f -name '*.rs'` (no pruning)",
    "rg-files": "`rg --files --no-ignore --hidden -g '*.rs' -g '!node_modules' -g '!.git' "
                "TREE`",
    "sbx-cli-grep": "`sbx grep -u bench -t search TREE needle_7f3a`",
    "sbx-lib-grep": "sbx_grep in-process",
    "gnu-grep": "`grep -r -H -n -I -i -E --exclude-dir=node_modules --exclude-dir=.git "
                "needle_7f3a TREE` (the same answer)",
    "gnu-grep-all": "`grep -r -H -n -I -i -E needle_7f3a TREE` (no exclusions)",
    "rg": "`rg -n -i --no-ignore --hidden -g '!node_modules' -g '!.git' needle_7f3a TREE`",
}

# ---------------------------------------------------------------------------------------------
# helpers


def pct(v, p):
    """Linear interpolation between closest ranks (R type 7), v sorted."""
    if not v:
        return float("nan")
    h = (len(v) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def fmt(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt_ratio(x):
    if x is None or math.isnan(x):
        return "–"
    if abs(x - 1) < 0.05:
        return f"{x:.3f}×"
    return f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def read_env(path):
    env = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    env[k] = v
    return env


class Stats:
    def __init__(self, ok, censored, bad):
        self.values = sorted(ok + censored)
        self.censored = len(censored)
        self.bad = bad
        self.n = len(self.values)
        self.median = pct(self.values, .5)
        self.p10 = pct(self.values, .1)
        self.p90 = pct(self.values, .9)
        # a median that a censored (timed-out) sample reaches is only a lower bound
        self.lower_bound = self.censored and self.n and self.censored * 2 >= self.n


def load_samples(res):
    data = OrderedDict()
    for row in read_tsv(os.path.join(res, "samples.tsv")):
        if len(row) < 5:
            continue
        g, c, _, ms, st = row[:5]
        d = data.setdefault(g, OrderedDict()).setdefault(c, ([], [], [0]))
        if st == "ok":
            d[0].append(float(ms))
        elif st == "timeout":
            d[1].append(float(ms))
        else:
            d[2][0] += 1
    return OrderedDict((g, OrderedDict((c, Stats(a, b, n[0])) for c, (a, b, n) in cs.items()))
                       for g, cs in data.items())


def med(stats, group, case):
    s = stats.get(group, {}).get(case)
    return s.median if s and s.n else None


def is_sbx(case):
    return case.startswith("sbx")


def op_of(case):
    for op in ("write", "read"):
        if op in case:
            return op
    return ""


# ---------------------------------------------------------------------------------------------
# plots (gnuplot, pngcairo)


def gnuplot(script, tmp):
    if shutil.which("gnuplot") is None:
        return False
    path = os.path.join(tmp, "plot.gp")
    with open(path, "w") as f:
        f.write(script)
    return subprocess.run(["gnuplot", path], capture_output=True).returncode == 0


def plot_ecdf(stats, group, out, title, tmp):
    cases = [c for c, s in stats.get(group, {}).items() if s.n]
    if not cases:
        return False
    plots = []
    for i, c in enumerate(cases):
        v = stats[group][c].values
        p = os.path.join(tmp, f"{group}-{i}.dat")
        with open(p, "w") as f:
            for k, x in enumerate(v):
                f.write(f"{x} {(k + 1) / len(v)}\n")
        plots.append(f"'{p}' using 1:2 with steps lw 2 title '{c}'")
    return gnuplot(f"""set terminal pngcairo noenhanced size 900,520 font 'sans,10'
set output '{out}'
set title '{title}'
set logscale x
set xlabel 'milliseconds (log scale)'
set ylabel 'fraction of runs at or below'
set key right bottom
set grid
set yrange [0:1]
plot {', '.join(plots)}
""", tmp)


def plot_density(dens, out, tmp):
    series = []
    for kind in ("sbx", "bwrap"):
        rows = sorted(dens.get(kind, {}).items())
        if not rows:
            continue
        p = os.path.join(tmp, f"dens-{kind}.dat")
        with open(p, "w") as f:
            f.write("0 0 0 0\n")
            for count, m in rows:
                kernel = m.get("d_slab_kib", 0) + m.get("d_pagetables_kib", 0) + \
                    m.get("d_kernelstack_kib", 0) + m.get("d_percpu_kib", 0)
                f.write(f"{count} {m.get('d_memavailable_kib', 0) / 1024} "
                        f"{m.get('pss_kib', 0) / 1024} {(m.get('pss_kib', 0) + kernel) / 1024}\n")
        series.append(f"'{p}' using 1:2 with linespoints lw 2 title '{kind}: MemAvailable drop'")
        series.append(f"'{p}' using 1:4 with linespoints lw 2 dt 2 title '{kind}: PSS + slab + "
                      "page tables + kernel stacks + percpu'")
    if not series:
        return False
    return gnuplot(f"""set terminal pngcairo noenhanced size 900,520 font 'sans,10'
set output '{out}'
set title 'Memory of idle sandboxes against their number'
set xlabel 'idle sandboxes'
set ylabel 'MiB (total)'
set key left top
set grid
plot {', '.join(series)}
""", tmp)


def plot_scale(scale, out, tmp):
    plots = []
    for mode, v in scale.items():
        if not v:
            continue
        v = sorted(v)
        p = os.path.join(tmp, "scale-" + re.sub(r"[^A-Za-z0-9]", "_", mode) + ".dat")
        with open(p, "w") as f:
            step = max(1, len(v) // 2000)
            for k in range(0, len(v), step):
                f.write(f"{v[k]} {(k + 1) / len(v)}\n")
            f.write(f"{v[-1]} 1\n")
        plots.append(f"'{p}' using 1:2 with steps lw 2 title '{mode}'")
    if not plots:
        return False
    return gnuplot(f"""set terminal pngcairo noenhanced size 900,520 font 'sans,10'
set output '{out}'
set title 'Warm exec latency with 8 parallel clients over the warm pool'
set logscale x
set xlabel 'milliseconds (log scale)'
set ylabel 'fraction of operations at or below'
set key right bottom
set grid
set yrange [0:1]
plot {', '.join(plots)}
""", tmp)


# ---------------------------------------------------------------------------------------------
# profiles


def parse_perf_lines(path, n):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.rstrip()
            m = re.match(r"\s*([\d.]+)%\s+(?:([\d.]+)%\s+)?(.*)$", line)
            if m:
                rows.append((float(m.group(1)), m.group(2), m.group(3).strip()))
    return rows[:n]


def parse_perf_trace_summary(path):
    """perf trace -s: {(comm, syscall): [calls, total_ms, max_ms]}, runs."""
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    runs = 1
    comm = None
    if not os.path.exists(path):
        return agg, runs
    with open(path) as f:
        for line in f:
            m = re.match(r"^ (\S+) \((\d+)\), \d+ events", line)
            if m:
                comm = m.group(1)
                continue
            m = re.match(r"^runs=(\d+)", line)
            if m:
                runs = int(m.group(1))
                continue
            m = re.match(r"^\s+(\w+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)",
                         line)
            if m and comm:
                a = agg[(comm, m.group(1))]
                a[0] += int(m.group(2))
                a[1] += float(m.group(4))
                a[2] = max(a[2], float(m.group(7)))
    return agg, runs


def strace_top(src, out, n=25):
    """Condenses strace -f -y -tt -T output: the n longest syscalls with their process."""
    names, pending, rows = {}, {}, []
    first_t = None
    with open(src, errors="replace") as f:
        for line in f:
            m = re.match(r"^(\d+)\s+(\d+):(\d+):([\d.]+)\s+(.*)$", line.rstrip("\n"))
            if not m:
                continue
            pid = int(m.group(1))
            t = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
            first_t = t if first_t is None else first_t
            rest = m.group(5)
            ex = re.match(r'execve\("([^"]+)"', rest)
            if ex:
                names[pid] = os.path.basename(ex.group(1))
            if rest.endswith("<unfinished ...>"):
                pending[pid] = (t, rest[:-len("<unfinished ...>")].strip())
                continue
            call, start = rest, t
            rm = re.match(r"<\.\.\. (\w+) resumed>(.*)$", rest)
            if rm:
                if pid in pending:
                    start, head = pending.pop(pid)
                    call = head + " … " + rm.group(2).strip()
                else:
                    call = rm.group(1) + "(…" + rm.group(2)
            cl = re.match(r"(?:clone3?|vfork|fork)\(.*=\s*(\d+)", call)
            if cl:  # the child runs the parent's program until it execs
                names.setdefault(int(cl.group(1)), names.get(pid, "?"))
            d = re.search(r"<([\d.]+)>$", rest)
            if not d:
                continue
            name = re.match(r"(\w+)\(", call)
            rows.append((float(d.group(1)) * 1000, start - first_t, names.get(pid, "?"),
                         name.group(1) if name else "?", call))
    # a process's name is the program it was running when the call was made: approximate with
    # the last execve seen (the launcher and PID 1 are sbx-init)
    rows.sort(key=lambda r: -r[0])
    with open(out, "w") as f:
        f.write("ms\tat_ms\tprocess\tsyscall\tcall\n")
        for ms, at, proc, sc, call in rows[:n]:
            call = re.sub(r"\s+", " ", call)
            if len(call) > 160:
                call = call[:157] + "..."
            f.write(f"{ms:.3f}\t{at * 1000:.1f}\t{proc}\t{sc}\t{call}\n")
        f.write(f"#total_ms\t{(rows and max(r[1] for r in rows) or 0) * 1000:.1f}\n")


def parse_callgrind(path, n=12):
    total, rows = None, []
    if not os.path.exists(path):
        return total, rows
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s*([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", line)
            if m:
                total = int(m.group(1).replace(",", ""))
                continue
            m = re.match(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+(\S+?):(\S+)(?: \[(.*)\])?\s*$", line)
            if m and total:
                lib = os.path.basename(m.group(5)) if m.group(5) else ""
                rows.append((int(m.group(1).replace(",", "")), float(m.group(2)), m.group(4), lib))
    return total, rows[:n]


# ---------------------------------------------------------------------------------------------
# the report


def main():
    if sys.argv[1] == "--strace-top":
        strace_top(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--trace-summary":
        agg, _ = parse_perf_trace_summary(sys.argv[2])
        with open(sys.argv[3], "w") as f:
            f.write(f"#runs\t{sys.argv[4]}\n")
            for (c, sc), (calls, tot, mx) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
                f.write(f"{c}\t{sc}\t{calls}\t{tot:.3f}\t{mx:.3f}\n")
        return
    res, bench = sys.argv[1], sys.argv[2]
    plots_dir = os.path.join(bench, "plots")
    os.makedirs(plots_dir, exist_ok=True)
    meta = read_env(os.path.join(res, "meta.env"))
    stats = load_samples(res)
    cmds = defaultdict(OrderedDict)
    for row in read_tsv(os.path.join(res, "commands.tsv")):
        if len(row) >= 3:
            cmds[row[0]][row[1]] = row[2]
    loads = {r[0]: (r[1], r[2]) for r in read_tsv(os.path.join(res, "load.tsv")) if len(r) >= 3}
    dens = defaultdict(lambda: defaultdict(dict))
    for r in read_tsv(os.path.join(res, "density.tsv")):
        if len(r) >= 4:
            dens[r[0]][int(r[1])][r[2]] = float(r[3])
    scale = OrderedDict()
    scale_bad = defaultdict(int)
    for r in read_tsv(os.path.join(res, "scale.tsv")):
        if len(r) >= 5:
            if r[4] == "ok":
                scale.setdefault(r[1], []).append(float(r[3]))
            else:
                scale_bad[r[1]] += 1
    scale_sum = {}
    if os.path.exists(os.path.join(res, "scale-summary.txt")):
        with open(os.path.join(res, "scale-summary.txt")) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) > 2 and parts[0] == "scale":
                    kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
                    scale_sum[parts[1]] = kv
    answers = {r[0]: r[1:] for r in read_tsv(os.path.join(res, "search-answers.tsv"))}
    quick = meta.get("quick") == "1"

    out = []
    w = out.append
    w("# sbx benchmark\n")
    where = os.path.relpath(res, os.path.dirname(os.path.abspath(bench)))
    w(f"Generated by `bench/report.sh` from the samples in `{where}/` "
      f"(run of {meta.get('date', '?')}, sbx {meta.get('sbx_commit', '?')}"
      f"{' with uncommitted changes in src/ or include/' if meta.get('sbx_dirty', '0') not in ('', '0') else ''}"
      f", {'**quick mode**: few samples, a small tree, few sandboxes' if quick else 'full run'}, "
      f"{meta.get('elapsed_s', '?')} s). Rerun everything with `bench/run.sh` "
      "(`make bench`); `BENCH_QUICK=1` for a quick validation run; `bench/report.sh` "
      "regenerates this file and the plots from the last samples.\n")
    w("All cases of a group run **interleaved in one process** (`bench/tb`: round-robin, the "
      "starting case rotating each round, warm-up rounds discarded), so a change of machine "
      "load hits every case of the group alike. Process cases are timed from `fork` to "
      "`waitpid` (CLOCK_MONOTONIC); in-process cases (`sbx-lib-*`, `host-*`, `sbxd-*`) around "
      "one call. Medians with p10 and p90; *ratio* is the median of the row divided by the "
      "median of the column.\n")

    # machine
    w("## Machine\n")
    w("| | |\n|---|---|")
    mem = int(meta.get("mem_total_kib", "0") or 0) / 1024 / 1024
    for k, label in (("cpu", "CPU"), ("cpus", "CPUs"), ("os", "OS"), ("kernel", "kernel"),
                     ("virt", "virtualisation"), ("kvm", "KVM modules"), ("cgroup", "cgroups")):
        w(f"| {label} | {meta.get(k, '?')} |")
    w(f"| memory | {mem:.1f} GiB |")
    w(f"| load average (1/5/15 min) | start {meta.get('load_start', '?')}, end "
      f"{meta.get('load_end', '?')} |")
    w(f"| peers | {meta.get('bwrap', '?')}; {meta.get('crun', '?')}; {meta.get('rg', '?')}; "
      f"{meta.get('grep', '?')}; {meta.get('find', '?')}; {meta.get('busybox', '?')}; "
      f"{meta.get('hyperfine', '?')} |")
    w(f"| sbxd | {meta.get('sbxd', 'absent')} |")
    w("")
    busy = [g for g, (a, b) in loads.items()
            if max(float(a.split()[0]), float(b.split()[0])) > 0.5 * int(meta.get("cpus", "2"))]
    w("**Load caveat.** Other work on the machine during a run moves every number here; the "
      "interleaving keeps the *ratios* within a group fair, not the absolute times. The "
      "1-minute load average before and after each group is in the table of each section"
      + (f"; it was above half the CPU count during: {', '.join(busy)}." if busy else ".")
      + "\n")

    # targets
    w("## Targets\n")
    targets = []

    def target(name, measured, limit, unit, better="le", note=""):
        if measured is None or limit is None:
            targets.append((name, "not measured", "", "–", note))
            return
        if better == "le":
            ok = measured <= limit
            by = (f"met, {fmt_ratio(limit / measured)} under the limit" if ok else
                  f"**missed**, {fmt_ratio(measured / limit)} over the limit")
            req = f"≤ {fmt(limit)} {unit}"
        else:
            ok = measured >= limit
            by = (f"met, {fmt_ratio(measured / limit)} the required" if ok else
                  f"**missed**, reaches {measured / limit * 100:.0f} % of the required")
            req = f"≥ {fmt(limit)}{unit}"
        targets.append((name, f"{fmt(measured)}{unit if unit == '×' else ' ' + unit}", req, by,
                        note))

    for g, how in (("cold-idle", "after an idle pause"), ("cold", "back to back")):
        bw = med(stats, g, "bwrap")
        target(f"cold start `sbx run -- true` ≤ 0.6 × bubblewrap ({how})",
               med(stats, g, "sbx-cli-run"), bw and 0.6 * bw, "ms",
               note=f"bwrap {fmt(bw)} ms; unshare {fmt(med(stats, g, 'unshare'))} ms; "
                    f"in-process (library) {fmt(med(stats, g, 'sbx-lib-run'))} ms")
        target(f"cold start with `spares: 2`, `sbx run -- true` ≤ 0.6 × bubblewrap ({how})",
               med(stats, g, "sbx-cli-run-spares"), bw and 0.6 * bw, "ms",
               note=f"in-process (library) {fmt(med(stats, g, 'sbx-lib-run-spares'))} ms")
    fl = med(stats, "warm", "floor")
    target("warm exec, CLI (`sbx exec`) ≤ 3 × floor", med(stats, "warm", "sbx-cli-exec"),
           fl and 3 * fl, "ms", note=f"floor (fork+exec /bin/true) {fmt(fl)} ms; with "
                                    f"`health_check_skip_seconds: 2` "
                                    f"{fmt(med(stats, 'warm', 'sbx-cli-exec-skip'))} ms")
    target("warm exec, library (sbx_execute_command) ≤ 2 × floor",
           med(stats, "warm", "sbx-lib-exec"), fl and 2 * fl, "ms",
           note=f"without the shell (argv): {fmt(med(stats, 'warm', 'sbx-lib-exec-argv'))} ms")
    target("warm exec, sbxd (`POST /command`) ≤ 2 × floor", med(stats, "warm", "sbxd-exec"),
           fl and 2 * fl, "ms", note=(f"`bash -c true` through the library: "
                                      f"{fmt(med(stats, 'warm', 'sbx-lib-exec-bash'))} ms"
                                      if med(stats, "warm", "sbxd-exec") else
                                      "sbxd was not built when this ran"))
    counts = sorted(dens.get("sbx", {}).keys())
    if counts:
        c = counts[-1]
        m = dens["sbx"][c]
        per = m.get("d_memavailable_kib", 0) / c / 1024
        attrib = (m.get("pss_kib", 0) + m.get("d_slab_kib", 0) + m.get("d_pagetables_kib", 0)
                  + m.get("d_kernelstack_kib", 0) + m.get("d_percpu_kib", 0)) / c / 1024
        target(f"idle memory per sandbox ≤ 1.5 MiB (at {c} sandboxes; the larger of the "
               "MemAvailable drop and PSS + kernel memory)", max(per, attrib), 1.5, "MiB",
               note=f"MemAvailable drop {per:.2f} MiB; PSS + slab + page tables + kernel "
                    f"stacks + percpu {attrib:.2f} MiB")
    else:
        target("idle memory per sandbox ≤ 1.5 MiB", None, None, "MiB")
    for mode in list(scale) or ["lib"]:
        v = sorted(scale.get(mode, []))
        base, _, rate = mode.partition("@")
        label = "library clients" if base == "lib" else "CLI clients (`sbx exec`)"
        how = f", paced to {rate} in all" if rate else ", flat out"
        target(f"{meta.get('scale_scopes', '?')} warm sandboxes, 8 {label}{how}: exec p99 < 20 ms",
               pct(v, .99) if v else None, 20, "ms",
               note=(f"p50 {fmt(pct(v, .5))} ms, {scale_sum.get(mode, {}).get('ops/s', '?')} "
                     "ops/s" if v else ""))
    for g, sbxc, peer, what in (("glob", "sbx-cli-glob", "gnu-find", "GNU find"),
                                ("grep", "sbx-cli-grep", "gnu-grep", "GNU grep")):
        target(f"{g}: `sbx {g}` no slower than {what} (same answer)", med(stats, g, sbxc),
               med(stats, g, peer), "ms",
               note=f"in-process: {fmt(med(stats, g, sbxc.replace('cli', 'lib')))} ms")
    for g, sbxc in (("glob", "sbx-cli-glob"), ("grep", "sbx-cli-grep")):
        s, b = med(stats, g, sbxc), med(stats, g, "seeds-busybox")
        st = stats.get(g, {}).get("seeds-busybox")
        target(f"{g}: ≥ 50 × faster than the seeds' busybox approach",
               b / s if s and b else None, 50, "×", better="ge",
               note=("busybox " + ("≥ " if st and st.lower_bound else "") + f"{fmt(b)} ms"
                     if b else ""))
    w("| target | measured | required | verdict | context |\n|---|---|---|---|---|")
    for t in targets:
        w("| " + " | ".join(t) + " |")
    w("")

    # groups
    w("## Results\n")
    groups = OrderedDict(GROUPS)
    for g in stats:
        m = re.match(r"^cold-(\d+)$", g)
        if m:
            groups[g] = (f"Cold start with {m.group(1)} warm sandboxes in the pool",
                         f"Back to back, like the first table, but {m.group(1)} idle sandboxes "
                         "of the density run are in the pool: creating a sandbox looks at the "
                         "pool (the replica cap), so its cost can grow with the pool's size. "
                         "`sbx-lib-first` creates a new scope's sandbox and runs `true` "
                         "(destroyed afterwards, untimed).")
    for g, (title, desc) in groups.items():
        if g not in stats:
            continue
        w(f"### {title}\n")
        if g in ("glob", "grep"):
            desc += (f" The tree (`bench/gentree.py`) has {int(meta.get('tree_files', 0)):,} "
                     "files: 25 % project sources, 72 % under node_modules, 3 % under .git.")
        w(desc.replace("{pause}", meta.get("pause_ms", "?")) + "\n")
        load = loads.get(g)
        rows = stats[g]
        w("| case | median ms | p10 | p90 | n | failed | what it is |\n"
          "|---|---:|---:|---:|---:|---:|---|")
        for c, s in rows.items():
            lb = "≥ " if s.lower_bound else ""
            cens = f" ({s.censored} timed out)" if s.censored else ""
            w(f"| {c} | {lb}{fmt(s.median)} | {fmt(s.p10)} | {fmt(s.p90)} | {s.n}{cens} | "
              f"{s.bad} | {CASES.get(c, '')} |")
        w("")
        sbx_rows = [c for c in rows if is_sbx(c) and rows[c].n]
        peers = [c for c in rows if not is_sbx(c) and rows[c].n]
        if sbx_rows and peers:
            if g.startswith("file-"):
                w("Ratios (write rows against write peers, read against read):\n")
            else:
                w("Ratios:\n")
            w("| | " + " | ".join(peers) + " |\n|---|" + "---:|" * len(peers))
            for c in sbx_rows:
                cells = []
                for p in peers:
                    if g.startswith("file-") and op_of(c) != op_of(p):
                        cells.append("")
                    else:
                        cells.append(fmt_ratio(rows[c].median / rows[p].median))
                w(f"| {c} | " + " | ".join(cells) + " |")
            w("")
        if load:
            w(f"Load average during the group: {load[0]} → {load[1]}.\n")
        if g == "cold":
            w("![cold start](plots/cold.png)\n")
        elif g == "cold-idle":
            w("![cold start after a pause](plots/cold-idle.png)\n")
        elif g == "warm":
            w("![warm exec](plots/warm.png)\n")
        if g in ("glob", "grep") and g in answers:
            exp, got_sbx, got_seeds = answers[g]
            w(f"Answers: the tree holds {exp} {'files' if g == 'glob' else 'matching lines'} "
              f"outside node_modules/.git; sbx returned {got_sbx}; the seeds' approach, after "
              f"DeerFlow's filtering, {got_seeds} (its raw output is capped at "
              f"{801 if g == 'glob' else 401} lines, which node_modules fills first).\n")
        if g in ("list-2000", "glob", "grep"):
            name = {"list-2000": "seeds-list-dir.sh", "glob": "seeds-glob.sh",
                    "grep": "seeds-grep.sh"}[g]
            p = os.path.join(res, name)
            if os.path.exists(p):
                with open(p) as f:
                    w(f"The seeds' command (`busybox sh results/{name}`):\n\n```sh\n"
                      f"{f.read().strip()}\n```\n")
    # density
    if dens:
        w("## Density: memory per idle sandbox\n")
        w("Sandboxes are started and left idle, then measured against a baseline taken before "
          "the first one: PSS and RSS summed over every process of every sandbox "
          "(`/proc/PID/smaps_rollup`), and the changes of MemAvailable, Slab, SUnreclaim, "
          "PageTables, KernelStack, Percpu and Shmem in `/proc/meminfo` (averaged over 3 "
          "reads, 1 s after the last start; the baseline waits until the kernel has finished "
          "freeing earlier sandboxes). sbx: scopes created with acquire + release through libsbx (config "
          "`sandbox: {replicas: 2000, idle_timeout: 0}`), each idle sandbox being its sbx-init "
          "(PID 1). bwrap: `bwrap --unshare-all ... sleep infinity` (outer bwrap, its PID-1 "
          "bwrap, sleep). Values are per sandbox, MiB. Other processes on the machine move the "
          "/proc/meminfo deltas; PSS counts only the sandboxes' own processes.\n")
        w("| sandbox | count | processes each | PSS | RSS | MemAvailable drop | slab | "
          "unreclaimable slab | page tables | kernel stacks | percpu | shmem | started in |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for kind in ("sbx", "bwrap"):
            for count, m in sorted(dens.get(kind, {}).items()):
                def per(k):
                    return m.get(k, 0) / count / 1024
                w(f"| {kind} | {count} | {m.get('procs', 0) / count:.1f} | "
                  f"{per('pss_kib'):.2f} | {per('rss_kib'):.2f} | "
                  f"{per('d_memavailable_kib'):.2f} | {per('d_slab_kib'):.2f} | "
                  f"{per('d_sunreclaim_kib'):.2f} | {per('d_pagetables_kib'):.3f} | "
                  f"{per('d_kernelstack_kib'):.3f} | {per('d_percpu_kib'):.3f} | "
                  f"{per('d_shmem_kib'):.3f} | {m.get('start_s', 0):.1f} s |")
        w("\n![memory against sandbox count](plots/density.png)\n")
    # scale
    if scale:
        w("## Scale: many warm sandboxes, parallel clients\n")
        w(f"{meta.get('scale_scopes', '?')} warm sandboxes (the density run's pool); 8 client "
          f"processes for {meta.get('scale_seconds', '?')} s each, every operation picking a "
          "sandbox at random and running `true` in it. *lib*: each client is a process with its "
          "own provider doing sbx_acquire (health check) + sbx_execute_command + sbx_release; "
          "*cli*: each operation is a `sbx exec -u bench -t dK -- true` process. Flat out, the "
          "clients saturate the CPUs and the latency is mostly queueing (Little's law: p50 ≈ "
          "clients ÷ throughput); *@R/s* paces the 8 clients to R operations per second in all, "
          "which shows the latency at a moderate load.\n")
        w("| clients | operations | failed | throughput | p50 ms | p90 ms | p99 ms | max ms |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
        for mode, v in scale.items():
            v = sorted(v)
            w(f"| {mode} | {len(v)} | {scale_bad.get(mode, 0)} | "
              f"{scale_sum.get(mode, {}).get('ops/s', '?')} /s | {fmt(pct(v, .5))} | "
              f"{fmt(pct(v, .9))} | {fmt(pct(v, .99))} | {fmt(v[-1])} |")
        lo = [f"{g}: {a} → {b}" for g, (a, b) in loads.items() if g.startswith("scale")]
        w(f"\nLoad average: {'; '.join(lo)}. With 2 CPUs, 8 clients queue for the CPU: the "
          "latency includes that wait.\n" if lo else "")
        w("![scale latency](plots/scale.png)\n")

    # hyperfine
    hp = os.path.join(res, "hyperfine.json")
    if os.path.exists(hp):
        with open(hp) as f:
            hj = json.load(f)
        w("## Cross-check with hyperfine\n")
        w("hyperfine runs each command's batch in turn (not interleaved), `-N` (no shell), 5 "
          "warm-up runs, 100 runs.\n")
        w("| command | median ms | mean ± σ ms | tb median ms (interleaved) |\n"
          "|---|---:|---:|---:|")
        for r in hj.get("results", []):
            name = r.get("command")
            tbm = med(stats, "cold", name) or med(stats, "warm", name)
            w(f"| {name} | {fmt(r['median'] * 1000)} | {fmt(r['mean'] * 1000)} ± "
              f"{fmt(r['stddev'] * 1000)} | {fmt(tbm)} |")
        w("")

    # MCP figures: measured separately by bench/mcp.sh, written by hand
    mcp_notes = os.path.join(bench, "mcp-notes.md")
    if os.path.exists(mcp_notes):
        with open(mcp_notes) as f:
            w(f.read().strip() + "\n")
    # keystroke round trips: bench/keystroke.py, run separately, written by hand
    ks_notes = os.path.join(bench, "keystroke.md")
    if os.path.exists(ks_notes):
        with open(ks_notes) as f:
            w(f.read().strip() + "\n")

    # DeerFlow's first tool call: measured separately by bench/deerflow.py, written by hand
    deerflow_notes = os.path.join(bench, "deerflow-notes.md")
    if os.path.exists(deerflow_notes):
        with open(deerflow_notes) as f:
            w(f.read().strip() + "\n")

    # rootless next to root: measured separately by bench/rootless.py, which writes this file
    rootless_notes = os.path.join(bench, "rootless-notes.md")
    if os.path.exists(rootless_notes):
        with open(rootless_notes) as f:
            w(f.read().strip() + "\n")

    profiles(w, res, bench)

    # commands
    w("## Exact commands\n")
    w("Paths as on the machine of this run (`$WORK` = the scratch directory). In-process "
      "cases are `bench/tb` builtins (`@name`, see `bench/tb_builtins.c`).\n")
    for g, cs in cmds.items():
        w(f"**{g}**\n\n```")
        for c, cmd in cs.items():
            w(f"{c}: {cmd}")
        w("```\n")
    w("Density: `bench/density.py` (bwrap: the command above with `sleep infinity`; sbx: "
      "`sbxbench populate`). Scale: `sbxbench scale HOME CONFIG bench d N 8 SECONDS lib|cli`. "
      "Profiles: `bench/profile.sh`.\n")

    w(LEFT_OUT)

    tmp = tempfile.mkdtemp()
    try:
        plot_ecdf(stats, "cold", os.path.join(plots_dir, "cold.png"),
                  "Cold start back to back: create, run true, destroy (ECDF)", tmp)
        plot_ecdf(stats, "cold-idle", os.path.join(plots_dir, "cold-idle.png"),
                  "Cold start after an idle pause (ECDF)", tmp)
        plot_ecdf(stats, "warm", os.path.join(plots_dir, "warm.png"),
                  "Warm exec of true (ECDF)", tmp)
        plot_density(dens, os.path.join(plots_dir, "density.png"), tmp)
        plot_scale(scale, os.path.join(plots_dir, "scale.png"), tmp)
    finally:
        shutil.rmtree(tmp)
    with open(os.path.join(bench, "README.md"), "w") as f:
        f.write("\n".join(out).rstrip() + "\n")


def profiles(w, res, bench):
    have = [p for p in ("run", "exec") if os.path.exists(os.path.join(res, f"profile-{p}-comm.txt"))]
    w("## Profiles\n")
    if not have:
        w("Not run this time (`BENCH_PROFILE=1 bench/run.sh`; off in quick mode).\n")
    notes = os.path.join(bench, "profile-notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            w(f.read().strip() + "\n")
    if not have:
        return
    w("The tables below are regenerated on every run (`bench/profile.sh`): perf samples "
      "cpu-clock at 2999 Hz over every process of a loop of the path (kernel and user space; "
      "the VM has no PMU), `perf trace -s` sums wall time per syscall (time spent blocked "
      "shows up here, not in CPU samples), strace gives the longest syscalls of one run after "
      "an idle pause, and callgrind counts the instructions of the `sbx` CLI process "
      "itself.\n")
    titles = {"run": "Cold start: `sbx run -- true`", "exec": "Warm exec: `sbx exec -t T -- true`"}
    for p in have:
        w(f"### {titles[p]}\n")
        comm = parse_perf_lines(os.path.join(res, f"profile-{p}-comm.txt"), 12)
        if comm:
            w("CPU samples by process and object:\n")
            w("| share | process, object |\n|---:|---|")
            for share, _, what in comm:
                w(f"| {share:.1f} % | {' '.join(what.split())} |")
            w("")
        selfp = parse_perf_lines(os.path.join(res, f"profile-{p}-self.txt"), 15)
        if selfp:
            w("Hottest functions (self):\n")
            w("| share | process, function |\n|---:|---|")
            for share, _, what in selfp:
                w(f"| {share:.1f} % | {' '.join(what.split())} |")
            w("")
        ch = parse_perf_lines(os.path.join(res, f"profile-{p}-children.txt"), 60)
        skip = re.compile(r"entry_SYSCALL|do_syscall_64|^\[\.\] 0x|^\[k\] 0x|0000000000000000|"
                          r"_start|__libc_start|main$|asm_exc_page_fault")
        ch = [r for r in ch if not skip.search(r[2])][:20]
        if ch:
            w("Inclusive (children) cost of kernel and library paths:\n")
            w("| inclusive | self | function |\n|---:|---:|---|")
            for share, selfs, what in ch:
                w(f"| {share:.1f} % | {selfs or ''} % | {what} |")
            w("")
        agg, runs = {}, 1
        for r in read_tsv(os.path.join(res, f"profile-{p}-syscalls.tsv")):
            if r[0] == "#runs":
                runs = int(r[1])
            elif len(r) >= 5:
                agg[(r[0], r[1])] = [int(r[2]), float(r[3]), float(r[4])]
        top = sorted(((k, v) for k, v in agg.items() if k[0] != "tb"), key=lambda kv: -kv[1][1])
        if top:
            w(f"Wall time in syscalls per run (`perf trace -s`, {runs} runs; blocking included; "
              "tracing slows every syscall a little):\n")
            w("| process | syscall | calls per run | ms per run | longest ms |\n"
              "|---|---|---:|---:|---:|")
            for (c, sc), (calls, tot, mx) in top[:15]:
                w(f"| {c} | {sc} | {calls / runs:.1f} | {tot / runs:.3f} | {mx:.3f} |")
            w("")
        tl = read_tsv(os.path.join(res, f"profile-{p}-strace-top.tsv"))
        if len(tl) > 1:
            total = [r for r in tl if r[0] == "#total_ms"]
            w("Longest syscalls of one run after a 0.5 s pause (strace, which slows each "
              "syscall; the run took " + (total[0][1] if total else "?") + " ms under it):\n")
            w("| ms | at ms | process | call |\n|---:|---:|---|---|")
            for r in tl[1:]:
                if r[0].startswith("#") or len(r) < 5:
                    continue
                call = r[4].replace("|", "\\|")
                w(f"| {r[0]} | {r[1]} | {r[2]} | `{call}` |")
            w("")
        total, cg = parse_callgrind(os.path.join(res, f"profile-{p}-callgrind.txt"))
        if total:
            w(f"callgrind, the `sbx` CLI process only: {total:,} instructions in all; the top "
              "functions:\n")
            w("| instructions | share | function | object |\n|---:|---:|---|---|")
            for ir, share, fn, lib in cg:
                w(f"| {ir:,} | {share:.1f} % | {fn} | {lib} |")
            w("")
    cga = read_tsv(os.path.join(res, "profile-cgroup-attach.tsv"))
    if len(cga) > 1:
        w("### Moving a process into a cgroup (v1)\n")
        w("`bench/cgattach.py`: a fresh process is moved into a new cgroup after a 0.2 s pause, "
          "three ways. Writing to `cgroup.procs` write-locks the global "
          "`cgroup_threadgroup_rwsem`, which waits for an RCU grace period when the lock was "
          "idle; a single-threaded process writing `0` to the v1 `tasks` file moves only "
          "itself and skips that lock.\n")
        w("| controller | method | median ms | min | max | n |\n|---|---|---:|---:|---:|---:|")
        for r in cga[1:]:
            w("| " + " | ".join(r) + " |")
        w("")


LEFT_OUT = """## What is left out

- **Absolute numbers on a busy machine.** Only the ratios within an interleaved group are
  robust to load; rerun on a quiet machine for absolute figures (the load averages are
  recorded with every group).
- **sbxd rows** run only when `build-bench/sbxd` exists (or `BENCH_SBXD_URL` points at one).
- **Micro-VM and gVisor tiers**: not built yet; this host's KVM is PVM and boots no stock
  guest kernel (docs: performance-anchors.md, B.4).
- **The seeds' Python filtering** after `find | head` / `grep -r` is not timed (in their
  favour), nor is the HTTP round trip to a remote sandbox they would also pay.
- **Cold page cache**: every search and file case runs with a warm page cache (warm-up runs
  first); no case drops caches (that would disturb other work on the machine).
- **Network**: sandboxes run with `network: none`; no case measures traffic.
- **Idle memory of sbxd itself**, and sbxd's create path under load.
- **perf hardware counters**: this VM exposes no PMU, so profiles are cpu-clock samples plus
  syscall wall times, and callgrind instruction counts for user space.
"""

if __name__ == "__main__":
    main()
