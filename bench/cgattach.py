#!/usr/bin/python3
"""How long it takes to move a new process into a cgroup (v1 controllers), by method.

On cgroup v1 (and v2), writing a pid to cgroup.procs takes the global
cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period whenever the rwsem
was idle: milliseconds on this kind of nested VM. A single-threaded process that writes "0"
to the v1 `tasks` file moves only itself and skips that lock. Each sample is taken after a
pause (so the lock is idle, as between an agent's calls), in a fresh child process.
Prints TSV: controller, method, median_ms, min_ms, max_ms, n.
"""
import os
import sys
import time

METHODS = {
    "parent writes pid to cgroup.procs": ("cgroup.procs", "parent"),
    "child writes its pid to cgroup.procs": ("cgroup.procs", "self"),
    "child writes 0 to tasks": ("tasks", "self0"),
}


def sample(base, fname, how):
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        os.read(go_r, 1)
        if how == "parent":
            os._exit(0)
        val = "0" if how == "self0" else str(os.getpid())
        t0 = time.perf_counter()
        with open(f"{base}/{fname}", "w") as f:
            f.write(val)
        os.write(w, b"%f" % ((time.perf_counter() - t0) * 1000))
        os._exit(0)
    os.close(w)
    os.close(go_r)
    if how == "parent":
        t0 = time.perf_counter()
        with open(f"{base}/{fname}", "w") as f:
            f.write(str(pid))
        ms = (time.perf_counter() - t0) * 1000
        os.write(go_w, b"x")
    else:
        os.write(go_w, b"x")
        ms = float(os.read(r, 64) or b"nan")
    os.close(r)
    os.close(go_w)
    os.waitpid(pid, 0)
    return ms


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    print("controller\tmethod\tmedian_ms\tmin_ms\tmax_ms\tn")
    for ctrl in ("memory", "pids"):
        root = f"/sys/fs/cgroup/{ctrl}"
        if not os.path.exists(f"{root}/tasks"):
            continue
        base = f"{root}/sbx-bench-attach-{os.getpid()}"
        os.makedirs(base, exist_ok=True)
        try:
            for name, (fname, how) in METHODS.items():
                v = []
                for _ in range(n):
                    time.sleep(0.2)
                    v.append(sample(base, fname, how))
                v.sort()
                print(f"{ctrl}\t{name}\t{v[len(v) // 2]:.3f}\t{v[0]:.3f}\t{v[-1]:.3f}\t{n}")
        finally:
            for _ in range(50):  # exited tasks leave the cgroup asynchronously
                try:
                    os.rmdir(base)
                    break
                except OSError:
                    time.sleep(0.05)


if __name__ == "__main__":
    main()
