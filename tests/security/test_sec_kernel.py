"""Mounts, namespaces and the kernel's wider surface, from inside a sandbox (docs/security.md,
"Kernel surface"). Each test fails if the attempt works."""
import os
import shutil
import subprocess

import pytest

# Every one of these must fail: the seccomp deny list, the capability bounding set, or the
# ownership of the namespaces (the host owns every namespace but the user namespace).
MUST_FAIL = [
    # mounts (the mount namespace is the host's: no CAP_SYS_ADMIN over it)
    "mount_tmpfs", "mount_bind_root", "remount_usr_rw", "mount_proc", "mount_cgroup",
    "umount_proc_sys", "fsopen", "open_tree", "mount_setattr",
    # namespaces
    "unshare_user", "unshare_mnt", "unshare_net", "unshare_pid", "unshare_ipc", "unshare_uts",
    "unshare_cgroup", "unshare_time", "clone_newuser", "clone_newns", "clone_newnet",
    "clone3_newuser", "setns_net", "setns_pid1_mnt", "pivot_root",
    # kernel keyring
    "add_key", "keyctl_join", "keyctl_read_user", "request_key",
    # bpf, perf, userfaultfd, io_uring
    "bpf_map_create", "bpf_prog_load", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter",
    # file handles (the "shocker" escape), modules, kexec, raw I/O, reboot, logs, swap, time
    "name_to_handle_at", "open_by_handle_at", "kexec_load", "init_module", "finit_module",
    "delete_module", "iopl", "ioperm", "reboot", "syslog", "swapon", "acct", "settimeofday",
    "clock_settime", "sethostname", "setdomainname",
    # PID 1 (sbx-init is not dumpable; ptrace and friends are refused)
    "ptrace_attach_pid1", "ptrace_seize_pid1", "process_vm_readv_pid1", "pidfd_getfd_pid1",
    "kcmp_pid1",
    # no host id is mapped
    "setuid_unmapped",
]


def test_syscall_surface(sbx, prober, thread):
    res, r = prober.run(thread, "syscalls")
    missing = [n for n in MUST_FAIL if n not in res]
    assert not missing, ("probe did not report", missing, r["stderr"])
    escaped = {n: res[n] for n in MUST_FAIL if res[n] in ("ok", "CRASHED")}
    assert not escaped, escaped
    # the i386 ABI (int 0x80) would dodge an x86_64-only filter: the process is killed
    assert res.get("int80_getpid", "").startswith("KILLED"), res.get("int80_getpid")


def test_capabilities_and_no_new_privs(sbx, thread):
    r = sbx.sh(thread, "grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff|CapAmb|CapInh):' "
               "/proc/self/status")
    st = dict(l.split(":\t") for l in r["stdout"].strip().split("\n"))
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    bnd = int(st["CapBnd"], 16)
    for cap, name in [(21, "SYS_ADMIN"), (19, "SYS_PTRACE"), (16, "SYS_MODULE"), (17, "SYS_RAWIO"),
                      (12, "NET_ADMIN"), (25, "SYS_TIME"), (22, "SYS_BOOT"), (2, "DAC_READ_SEARCH"),
                      (24, "SYS_RESOURCE"), (38, "PERFMON"), (39, "BPF"), (34, "SYSLOG")]:
        assert not bnd & (1 << cap), "CAP_%s is in the bounding set" % name
    assert int(st["CapAmb"], 16) == 0 and int(st["CapInh"], 16) == 0
    # setuid binaries do not raise privileges (no_new_privs; no host id is mapped anyway)
    r = sbx.sh(thread, "cp /bin/true /tmp/t 2>&1; chmod u+s /tmp/t; ls -l /tmp/t; "
               "grep -c . /proc/self/uid_map; cat /proc/self/uid_map")
    # one map line: root inside is the first id of the sandbox's own host range (ids.c)
    inside, base, count = (int(x) for x in r["stdout"].split()[-3:])
    assert r["stdout"].split()[-4] == "1" and (inside, count) == (0, 65536), r["stdout"]
    assert 0x10000000 <= base < 0x40000000, r["stdout"]


def test_chroot_escape_ends_in_the_sandbox_root(sbx, prober, thread):
    res, _ = prober.run(thread, "chroot")
    # chroot itself is allowed (CAP_SYS_CHROOT, as in Docker's default set); climbing out of the
    # jail through a descriptor of the old root must end at the sandbox's own root
    assert res["same_root"] == "1"
    assert res["host_marker_work"] == "0" and res["host_marker_boot"] == "0"
    assert res["user_data_visible"] == "1"


def test_device_nodes_and_kernel_tunables(sbx, prober, thread):
    res, _ = prober.run(thread, "devices")
    must_fail = [k for k in res if k.startswith(("mknod_", "open_dev_", "open_made_", "write_proc",
                                                "write_sys_", "read_proc_kcore"))]
    assert len(must_fail) >= 20, res
    bad = {k: res[k] for k in must_fail if res[k] == "ok"}
    assert not bad, bad
    # the host's cgroup tree is not reachable
    assert res["stat_sys_fs_cgroup_memory"] != "ok"
    # /dev has only the harmless nodes, and /proc/sys and /sys are read-only mounts
    r = sbx.sh(thread, "ls /dev; grep -E ' /(proc/sys|sys) ' /proc/self/mountinfo")
    devs = set(r["stdout"].split())
    for bad in ("mem", "kmem", "port", "kmsg", "vda", "sda", "nvme0n1", "kvm", "fuse", "loop0"):
        assert bad not in devs
    for line in r["stdout"].splitlines():
        if " /proc/sys " in line or " /sys " in line:
            assert " ro," in line or " ro " in line, line


def test_hostname_and_sysctls_unchanged_on_host(sbx, thread):
    with open("/proc/sys/kernel/hostname") as f:
        before = f.read()
    r = sbx.sh(thread, "hostname pwned 2>&1; echo pwned > /proc/sys/kernel/hostname 2>&1; "
               "sysctl -w kernel.domainname=pwned 2>&1; echo 1 > /proc/sys/vm/drop_caches 2>&1; "
               "hostname")
    assert r["stdout"].strip().splitlines()[-1] == "sbx-" + sbx.ps()[0]["id"]
    with open("/proc/sys/kernel/hostname") as f:
        assert f.read() == before


def test_kill_everything_inside_leaves_pid1_serving(sbx, prober, thread):
    """kill -9 -1, SIGKILL/SIGSEGV/SIGSTOP and pidfd signals at PID 1 from inside: sbx-init
    survives (the kernel drops signals a pid namespace's init has no handler for)."""
    sbx.sh(thread, "sleep 300 >/dev/null 2>&1 & echo started")
    pid_before = sbx.ps()[0]["pid"]
    res, _ = prober.run(thread, "proc1")
    assert res["pid1_alive"] == "1"
    r = sbx.sh(thread, "kill -9 -1; echo after")
    r = sbx.sh(thread, "ps -eo pid,comm --no-headers")
    assert r["stdout"].split()[0:2] == ["1", "sbx-init"]
    assert "sleep" not in r["stdout"]
    assert sbx.ps()[0]["pid"] == pid_before


def test_pid1_magic_links_and_memory(sbx, prober, thread):
    res, _ = prober.run(thread, "proc1")
    for name in ("readlink_1_root", "open_1_root", "readlink_1_cwd", "open_1_cwd", "open_1_exe",
                 "open_1_fd_5", "open_1_fd_6", "open_1_fd_8", "open_1_ns_mnt",
                 "open_1_root_etc_passwd", "open_1_environ", "open_1_mem", "open_1_maps",
                 "open_1_fd_dir", "open_1_map_files", "write_1_mem", "write_1_comm"):
        assert res[name] != "ok", (name, res[name])


@pytest.mark.parametrize("path", ["/proc/1/root/etc/passwd", "/proc/self/root/etc/passwd",
                                  "/proc/1/environ", "/proc/self/environ", "/proc/self/mem",
                                  "/proc/1/cwd/etc/hostname", "/proc/self/fd/6",
                                  "/proc/thread-self/root/etc/hostname"])
def test_file_ops_refuse_pid1_magic_links(sbx, thread, path):
    """The file operations run in sbx-init itself: /proc/self is PID 1 there. Magic links are
    refused (RESOLVE_NO_MAGICLINKS) and PID 1's own files are not readable (not dumpable)."""
    marker = "SBX-HOST-ENV-%d" % os.getpid()
    sbx.run("rm", "-t", thread)
    # the environment of whoever starts the sandbox must not be readable inside it
    sbx.run("exec", "-t", thread, "--", "true", env={"SBX_SEC_MARKER": marker}, check=0)
    p = sbx.run("read", "-t", thread, path)
    assert p.returncode == 1, (path, p.stdout[:200])
    assert marker.encode() not in p.stdout
    for verb in (["grep", "-t", thread, path, "."], ["ls", "-t", thread, path],
                 ["glob", "-t", thread, path, "*"]):
        p = sbx.run(*verb)
        assert marker.encode() not in p.stdout
        assert b"/etc/shadow" not in p.stdout


def test_host_ipc_and_shared_memory_invisible(sbx, thread):
    """The IPC namespace and /dev/shm are the sandbox's own: the host's System V segments and
    POSIX shared memory are out of sight."""
    shm = "/dev/shm/sbx-sec-%d" % os.getpid()
    with open(shm, "w") as f:
        f.write("HOST-SHM\n")
    seg = None
    try:
        if shutil.which("ipcmk"):
            out = subprocess.run(["ipcmk", "-M", "4096"], capture_output=True, text=True).stdout
            seg = out.split(":")[-1].strip() if "id:" in out.lower() else None
        r = sbx.sh(thread, "ls -A /dev/shm; ipcs -m 2>/dev/null | tail -n +4")
        assert "sbx-sec-" not in r["stdout"]
        if seg:
            assert not [l for l in r["stdout"].splitlines() if l.split()[1:2] == [seg]]
        r = sbx.sh(thread, "cat %s 2>/dev/null; true" % shm)
        assert "HOST-SHM" not in r["stdout"]
    finally:
        os.unlink(shm)
        if seg:
            subprocess.run(["ipcrm", "-m", seg], capture_output=True)
