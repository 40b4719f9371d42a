"""Hosts that are not this one (docs/hosts.md): `sbx doctor`, the kernel floor (old kernels are
simulated with ENOSYS from a seccomp filter, tests/security/probe.c `nosys`), and the cgroup
shapes a host can have: a read-only /sys/fs/cgroup (a container's default), no cgroups at all
(cgroup_manager: none) and, in a private mount namespace, a unified hierarchy mounted at
/sys/fs/cgroup (on a hybrid host that one has no controllers: placement works, limits are
refused by name). The v2 paths with controllers run in the qemu guest (make guest-check)."""
import os
import shutil
import subprocess

import pytest

from conftest import SBX, SOURCE

# x86_64 system call numbers
SYS_OPEN_TREE = 428
SYS_OPENAT2 = 437
SYS_CLOSE_RANGE = 436
SYS_MOUNT_SETATTR = 442


@pytest.fixture(scope="module")
def probe_bin(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the probe")
    out = tmp_path_factory.mktemp("probe") / "probe"
    subprocess.run([gcc, "-O1", "-o", str(out), os.path.join(SOURCE, "tests/security/probe.c")],
                   check=True)
    return str(out)


def write_config(path, **sandbox):
    lines = ["sandbox:"]
    for k, v in sandbox.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append("  %s: %s" % (k, v))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def cgroup_v1_mounts():
    """The cgroup mounts under /sys/fs/cgroup, the tmpfs holding them included."""
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET", "-R", "/sys/fs/cgroup"],
                         capture_output=True, text=True).stdout.split()
    return out


def in_private_mounts(script, *args, timeout=120):
    """Runs a shell script in a mount namespace of its own (the host's mounts stay as they are)."""
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
                          + [str(a) for a in args], capture_output=True, timeout=timeout)


def test_doctor_reports_this_host(sbx):
    p = sbx.run("doctor")
    out = p.stdout.decode()
    assert p.returncode == 0, out
    for name in ("kernel", "open_tree", "openat2", "close_range", "mount_setattr", "seccomp",
                 "user ns", "cgroup"):
        assert "] %s" % name in out, (name, out)
    assert out.rstrip().endswith("sandboxes can start here: 0 failed, %s warnings" %
                                 out.rstrip().rsplit(" ", 2)[1])
    assert sbx.run("doctor", "--help").returncode == 0
    assert sbx.run("doctor", "extra").returncode == 2
    assert b"doctor" in subprocess.run([SBX, "--help"], capture_output=True).stdout


@pytest.mark.parametrize("nr,name", [(SYS_OPENAT2, "openat2"), (SYS_CLOSE_RANGE, "close_range"),
                                     (SYS_OPEN_TREE, "open_tree")])
def test_old_kernel_refused_by_name(sbx, probe_bin, nr, name):
    """Below the floor a create fails at once naming the missing call and its Linux version
    (regression: below 5.9 commands inherited sbx-init's descriptors, below 5.6 exec failed
    with a bare ENOSYS from a mount), doctor fails on the same line, and nothing is made."""
    p = subprocess.run([probe_bin, "nosys", str(nr)] + sbx.cmd("exec", "-t", "a", "--", "true"),
                       capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "lacks %s (Linux " % name in err and "sbx doctor" in err and "5.9" in err, err
    assert not os.path.isdir(os.path.join(sbx.home, "sandboxes")) or \
        os.listdir(os.path.join(sbx.home, "sandboxes")) == []
    d = subprocess.run([probe_bin, "nosys", str(nr)] + sbx.cmd("doctor"), capture_output=True)
    out = d.stdout.decode()
    assert d.returncode == 1, out
    assert any(line.startswith("[FAIL] %s" % name) and "MISSING" in line
               for line in out.splitlines()), out
    assert "sandboxes cannot start here" in out
    # positive control: the same probe with a call sbx does not use
    ok = subprocess.run([probe_bin, "nosys", "435"] + sbx.cmd("exec", "-t", "a", "--", "echo hi"),
                        capture_output=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == b"hi\n", ok.stderr


def test_no_mount_setattr_refuses_read_only_mounts_only(tmp_path, make_sbx, probe_bin):
    """5.10 (Debian 11) lacks mount_setattr: a read_only mount is refused by name (regression:
    `make ... read-only: Function not implemented`), sandboxes without one still work."""
    src = tmp_path / "ro"
    src.mkdir()
    (src / "f").write_text("data\n")
    cfg = tmp_path / "ro.yaml"
    cfg.write_text("sandbox:\n  mounts:\n    - host_path: %s\n      container_path: /mnt/ro\n"
                   "      read_only: true\n" % src)
    s = make_sbx(config=str(cfg))
    p = subprocess.run([probe_bin, "nosys", str(SYS_MOUNT_SETATTR)] +
                       s.cmd("exec", "-t", "a", "--", "cat /mnt/ro/f"), capture_output=True,
                       timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 1 and "a read_only mount needs mount_setattr (Linux 5.12)" in err, err
    plain = make_sbx()
    p = subprocess.run([probe_bin, "nosys", str(SYS_MOUNT_SETATTR)] +
                       plain.cmd("exec", "-t", "a", "--", "echo ok"), capture_output=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout == b"ok\n", p.stderr
    d = subprocess.run([probe_bin, "nosys", str(SYS_MOUNT_SETATTR)] + plain.cmd("doctor"),
                       capture_output=True)
    assert d.returncode == 0 and b"[warn] mount_setattr" in d.stdout, d.stdout
    # positive control: without the filter the read-only mount works
    assert s.run("exec", "-t", "a", "--", "cat /mnt/ro/f", check=0).stdout == b"data\n"


RO_CGROUPS = 'for m in $(findmnt -rn -o TARGET -R /sys/fs/cgroup); do ' \
             'mount -o remount,bind,ro "$m" || exit 99; done; exec "$@"'


def test_read_only_cgroupfs_refused_clearly_or_run_without_limits(tmp_path, make_sbx):
    """Docker mounts /sys/fs/cgroup read-only: by default a create is refused saying so and
    what to do (regression: a bare `create cgroup /sys/fs/cgroup/sbx: Read-only file system`);
    with cgroup_required: false the sandbox runs, without a cgroup, and the CLI warns."""
    s = make_sbx()
    p = in_private_mounts(RO_CGROUPS, *s.cmd("exec", "-t", "a", "--", "echo hi"))
    err = p.stderr.decode()
    assert p.returncode == 1, (p.returncode, err)
    assert "Read-only file system" in err and "read-only" in err and "sbx doctor" in err and \
        "cgroup_required: false" in err, err
    d = in_private_mounts(RO_CGROUPS, *s.cmd("doctor"))
    assert d.returncode == 1 and b"read-only" in d.stdout, d.stdout
    opt = make_sbx(config=write_config(tmp_path / "opt.yaml", cgroup_required=False))
    p = in_private_mounts(RO_CGROUPS, *opt.cmd("exec", "-t", "a", "--", "echo hi"))
    assert p.returncode == 0 and p.stdout == b"hi\n", p.stderr
    assert b"WITHOUT a cgroup" in p.stderr and b"Read-only file system" in p.stderr, p.stderr
    d = in_private_mounts(RO_CGROUPS, *opt.cmd("doctor"))
    assert d.returncode == 0 and b"[warn]" in d.stdout, d.stdout
    # positive control: the same home with writable cgroups gets its cgroup and no warning
    p = s.run("exec", "-t", "b", "--", "echo hi")
    assert p.returncode == 0 and b"WITHOUT" not in p.stderr, p.stderr


def test_cgroup_manager_none_runs_without_cgroups_and_says_so(tmp_path, make_sbx):
    s = make_sbx(config=write_config(tmp_path / "none.yaml", cgroup_manager="none"))
    p = s.run("exec", "-t", "a", "--", "cat /proc/self/cgroup")
    assert p.returncode == 0, p.stderr
    assert b"WITHOUT a cgroup" in p.stderr and b"cgroup_manager is none" in p.stderr
    pid = [x["pid"] for x in s.ps()][0]
    with open("/proc/%d/cgroup" % pid) as f:
        assert "/sbx/" not in f.read()
    d = s.run("doctor")
    assert d.returncode == 0 and b"[warn] cgroup" in d.stdout, d.stdout
    bad = make_sbx(config=write_config(tmp_path / "bad.yaml", cgroup_manager="cgroupv3"))
    p = bad.run("exec", "-t", "a", "--", "true")
    assert p.returncode != 0 and b"must be 'auto', 'cgroupfs', 'systemd' or 'none'" in p.stderr


def _hybrid():
    try:
        with open("/sys/fs/cgroup/unified/cgroup.controllers") as f:
            return "memory" not in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _hybrid(), reason="needs a hybrid host (an empty cgroup2 beside v1)")
def test_unified_hierarchy_without_controllers(tmp_path, make_sbx):
    """A cgroup2 at /sys/fs/cgroup whose controllers are all elsewhere (bound to v1 here; not
    delegated on a real host): the sandbox gets its cgroup below ours (pause works, the
    cgroup goes with the sandbox), and a limit it cannot have is refused naming the
    controller (regression: `set memory.max ...: No such file or directory`)."""
    s = make_sbx(config=write_config(tmp_path / "nolimits.yaml", memory_mib=0, pids=0))
    script = ('mount -t cgroup2 none /sys/fs/cgroup || exit 99; "$@" exec -t a -- echo hi || exit 1; '
              'ls -d /sys/fs/cgroup/sbx/*-* | wc -l; "$@" rm -t a || exit 2; '
              'ls -d /sys/fs/cgroup/sbx/*-* 2>/dev/null | wc -l')
    p = in_private_mounts(script, *s.cmd())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [b"hi", b"1", b"0"], (p.stdout, p.stderr)
    limited = make_sbx()
    p = in_private_mounts('mount -t cgroup2 none /sys/fs/cgroup || exit 99; exec "$@"',
                          *limited.cmd("exec", "-t", "a", "--", "true"))
    err = p.stderr.decode()
    assert p.returncode == 1 and "the `memory` controller is not available" in err and \
        "sbx doctor" in err, err
    d = in_private_mounts('mount -t cgroup2 none /sys/fs/cgroup || exit 99; exec "$@"',
                          *limited.cmd("doctor"))
    out = d.stdout.decode()
    assert d.returncode == 1 and "unified (v2)" in out and "memory pids cpu" in out, out
