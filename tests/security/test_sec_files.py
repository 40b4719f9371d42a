"""Host files, the state directory, other sandboxes' files, inherited descriptors, links and
oversized names and paths (docs/security.md, "Files"). Each test fails if the escape works."""
import json
import os
import resource
import subprocess
import time

import pytest

import sbxsec
from sbxsec import WS, thread_dir


def test_host_files_invisible(sbx, thread, host_secret):
    marker, paths = host_secret
    for p in paths:
        r = sbx.sh(thread, "cat %s 2>&1; echo rc=$?" % p)
        assert marker not in r["stdout"], p
        assert sbx.run("read", "-t", thread, p).returncode == 1
    # search every writable or host-looking part of the tree for the marker (/usr is the host's
    # read-only /usr, shared by design): nothing
    r = sbx.sh(thread, "grep -rIl %s /root /home /tmp /var /etc /mnt /run /opt 2>/dev/null; "
               "cat /etc/shadow 2>&1; ls -A /home /root /var 2>&1" % marker, timeout=120)
    assert marker not in r["stdout"]
    assert "sbx-sec-secret" not in r["stdout"]
    for root in ("/root", "/home", "/tmp", "/var", "/etc", "/mnt", "/run"):
        p = sbx.run("grep", "-t", thread, root, marker, "--fixed", "--json", timeout=120)
        assert marker.encode() not in p.stdout, root


def test_generated_etc_not_the_hosts(sbx, thread):
    r = sbx.sh(thread, "cat /etc/passwd /etc/group; ls /etc")
    with open("/etc/passwd") as f:
        host_users = [l.split(":")[0] for l in f if not l.startswith(("root:", "nobody:"))]
    for u in host_users:
        assert "\n%s:" % u not in "\n" + r["stdout"]
    for name in ("shadow", "gshadow", "sudoers", "ssh", "machine-id"):
        assert name not in r["stdout"].split()


def test_state_dir_invisible(sbx, thread):
    sbx.sh(thread, "true")
    home = os.path.realpath(sbx.home)
    r = sbx.sh(thread, "find / -xdev \\( -name ctl.sock -o -name lease -o -name meta \\) "
               "2>/dev/null; find / -type s 2>/dev/null | grep -v '^/proc'")
    assert r["stdout"].split() == [], r["stdout"]
    r = sbx.sh(thread, "ls -A /mnt/user-data")
    assert sorted(r["stdout"].split()) == ["outputs", "uploads", "workspace"]
    # the control socket is not reachable by any path (pathname sockets ignore netns)
    for path in (os.path.join(home, "sandboxes"), home):
        r = sbx.sh(thread, "ls %s 2>&1; echo rc=$?" % path)
        assert r["stdout"].strip().endswith("rc=2"), r["stdout"]


def test_another_sandbox_files_and_processes_invisible(sbx):
    a, b = sbxsec.new_thread("a"), sbxsec.new_thread("b")
    secret = "OTHER-SANDBOX-SECRET-%d" % os.getpid()
    sbx.sh(a, "echo %s > /tmp/secret; echo %s > %s/secret; (exec -a sbx-sec-holder sleep 60 &) "
           % (secret, secret, WS))
    # same thread, another user: another sandbox too
    half = len(secret) // 2  # split, so that the command line itself does not hold it
    r1 = sbx.sh(b, "grep -rIl '%s''%s' /tmp /mnt /root 2>/dev/null; ps -eo args; ls %s"
                % (secret[:half], secret[half:], WS))
    r2 = sbx.sh(a, "cat %s/secret" % WS, user="other")
    for r in (r1, r2):
        assert secret not in r["stdout"]
        assert "sbx-sec-holder" not in r["stdout"]
    assert sbx.run("read", "-t", b, WS + "/secret").returncode == 1
    assert sbx.run("read", "-t", a, "-u", "other", "/tmp/secret").returncode == 1
    # the other sandbox's thread folder on the host is not mounted
    other = thread_dir(sbx, a)
    r = sbx.sh(b, "ls %s 2>&1; echo rc=$?" % other)
    assert r["stdout"].strip().endswith("rc=2")


def test_inherited_host_descriptors_do_not_reach_the_sandbox(sbx, thread, tmp_path):
    """A front-end that starts a sandbox while holding descriptors without close-on-exec (a
    host directory, a host file) must not leak them into sbx-init, where the file operations
    (which run in sbx-init) could reach them through /proc/self/fd. Regression: both leaked."""
    secret_dir = tmp_path / "host-dir"
    secret_dir.mkdir()
    marker = "LEAKED-DESCRIPTOR-%d" % os.getpid()
    (secret_dir / "secret.txt").write_text(marker + "\n")
    # numbers above what the CLI itself uses (the launcher's spec socket becomes its fd 3)
    dfd = os.dup2(os.open(str(secret_dir), os.O_RDONLY | os.O_DIRECTORY), 40)
    ffd = os.dup2(os.open(str(secret_dir / "secret.txt"), os.O_RDONLY), 41)
    try:
        os.set_inheritable(dfd, True)
        os.set_inheritable(ffd, True)
        p = subprocess.run(sbx.cmd("exec", "-t", thread, "--", "true"), pass_fds=(dfd, ffd),
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
    finally:
        os.close(dfd)
        os.close(ffd)
    pid = sbxsec.sandbox_pid(sbx, thread)
    # on the host: PID 1 of the sandbox holds nothing of the test's
    targets = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            targets.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    assert not [t for t in targets if str(secret_dir) in t], targets
    # inside, through every file operation and the working directory
    for n in range(3, 64):
        path = "/proc/self/fd/%d" % n
        for verb in (["ls", "-t", thread, path], ["glob", "-t", thread, path, "**"],
                     ["grep", "-t", thread, path, marker], ["read", "-t", thread, path],
                     ["read", "-t", thread, path + "/secret.txt"]):
            p = sbx.run(*verb)
            assert marker.encode() not in p.stdout, verb
    # a symlink planted to them changes nothing
    sbx.sh(thread, "for n in $(seq 3 20); do ln -sfn /proc/self/fd/$n %s/fd$n; done" % WS)
    p = sbx.run("grep", "-t", thread, WS, marker, "--json")
    assert marker.encode() not in p.stdout
    for n in range(3, 21):
        assert marker.encode() not in sbx.run("ls", "-t", thread, "%s/fd%d" % (WS, n)).stdout


def test_commands_start_with_stdio_only(sbx, prober, thread):
    """sbx-init's own descriptors (control socket, lease, root, epoll...) are closed in commands."""
    res, r = prober.run(thread, "fds")
    fds = [l.split()[1] for l in r["stdout"].splitlines() if l.startswith("fd ")]
    assert sorted(fds) == ["0", "1", "2"], r["stdout"]


def test_symlinks_through_every_file_op(sbx, thread, host_secret, tmp_path):
    marker, paths = host_secret
    secret = paths[0]
    sbx.sh(thread, "ln -s %s %s/link; ln -s / %s/rootlink; ln -s /etc %s/etclink; "
           "ln -s ../../../../../../../../ %s/up; ln -s /proc/1/root %s/p1root"
           % (secret, WS, WS, WS, WS, WS))
    reads = [WS + "/link", WS + "/rootlink" + secret, WS + "/up" + secret, WS + "/p1root/etc/passwd",
             WS + "/up/etc/shadow"]
    for p in reads:
        for verb in ("read", "download"):
            r = sbx.run(verb, "-t", thread, p)
            assert marker.encode() not in r.stdout and b"root:$" not in r.stdout, (verb, p)
    # (the roots avoid /usr, the host's read-only /usr shared by design: walking it is slow)
    for root in (WS, WS + "/rootlink/root", WS + "/rootlink/tmp", WS + "/up/root", WS + "/up/home",
                 WS + "/p1root", WS + "/etclink"):
        r = sbx.run("grep", "-t", thread, root, marker, "--fixed", "--json", timeout=120)
        assert marker.encode() not in r.stdout, root
        r = sbx.run("glob", "-t", thread, root, "**/sbx-sec-secret*", "--json")
        assert b"sbx-sec-secret" not in r.stdout, root
        r = sbx.run("ls", "-t", thread, root, "--json")
        assert b"sbx-sec-secret" not in r.stdout, root
    # writes, appends and uploads through links land inside the sandbox or fail
    before = {p: open(p).read() for p in paths}
    for target in (WS + "/link", WS + "/rootlink" + secret, WS + "/up" + secret):
        sbx.run("write", "-t", thread, target, input=b"OVERWRITTEN")
        sbx.run("write", "-t", thread, target, "--append", input=b"APPENDED")
        sbx.run("upload", "-t", thread, target, input=b"UPLOADED")
    for p in paths:
        assert open(p).read() == before[p]
    for name in ("sbx-sec-written",):
        for via in ("/rootlink/root/", "/up/root/", "/etclink/", "/up/tmp/"):
            sbx.run("write", "-t", thread, WS + via + name, input=b"x")
        for host in ("/root", "/etc", "/tmp"):
            assert not os.path.exists(os.path.join(host, name))


def test_hardlinks_cannot_cross_into_the_thread_folder(sbx, prober, thread):
    res, _ = prober.run(thread, "hardlink")
    for k in ("link_usr_bin_sh", "link_etc_passwd", "link_etc_ssl", "link_proc_self_exe"):
        assert res[k] != "ok", (k, res[k])
    folder = os.path.join(thread_dir(sbx, thread), "workspace")
    assert not [n for n in os.listdir(folder) if n.startswith(".sbx-hl-")]


def test_dotdot_refused_by_every_op(sbx, thread):
    for args in (["read", "-t", thread, WS + "/../../../etc/passwd"],
                 ["read", "-t", thread, WS + "/..\\..\\..\\etc/passwd"],
                 ["download", "-t", thread, "/mnt/user-data/../../etc/passwd"],
                 ["download", "-t", thread, "/mnt/user-data/workspace/.."],
                 ["write", "-t", thread, WS + "/../../../tmp/x"],
                 ["write", "-t", thread, WS + "/a/../../x", "--append"],
                 ["upload", "-t", thread, WS + "/../x"],
                 ["ls", "-t", thread, WS + "/.."],
                 ["glob", "-t", thread, WS + "/..", "*"],
                 ["grep", "-t", thread, WS + "/../..", "root"]):
        p = sbx.run(*args, input=b"x")
        assert p.returncode == 1 and b"path traversal detected" in p.stderr, args
    # a pattern is not a path: `..` in a glob pattern never leaves the root
    p = sbx.run("glob", "-t", thread, WS, "../**", "--json")
    assert json.loads(p.stdout or b'{"matches":[]}').get("matches", []) == [] or p.returncode == 1
    # download stays under /mnt/user-data whatever the spelling
    for path in ("/mnt/user-database/x", "/mnt//user-data/../etc/passwd", "/etc/passwd",
                 "/mnt/user-data2/x", "mnt/user-data/workspace/x"):
        p = sbx.run("download", "-t", thread, path)
        assert p.returncode != 0 and b"root:" not in p.stdout, path


def test_oversized_names_and_paths(sbx, prober, thread):
    res, _ = prober.run(thread, "names", WS)
    assert res["create_name_255"] == "ok" and res["create_name_256"] == "ENAMETOOLONG"
    name255 = WS + "/" + "n" * 255
    assert sbx.run("read", "-t", thread, name255, check=0).stdout == b"MAXNAME\n"
    assert sbx.run("download", "-t", thread, name255, check=0).stdout == b"MAXNAME\n"
    for path in (WS + "/" + "m" * 256, WS + "/" + "m" * 5000, "/" + "a/" * 2100 + "x",
                 WS + "/" + "/".join(["n" * 255] * 17)):
        for verb in (["read"], ["download"], ["write"], ["write", "--append"], ["upload"],
                     ["ls"]):
            args = [verb[0], "-t", thread, path] + verb[1:]
            p = sbx.run(*args, input=b"x")
            assert p.returncode == 1, (args[:3], p.returncode)
            assert b"too long" in p.stderr, p.stderr[:300]
    # a pattern of 100 KB: refused or answered, never a hang or a crash
    t0 = time.monotonic()
    p = sbx.run("grep", "-t", thread, WS, "(a*)*b" * 10000, timeout=120)
    assert p.returncode in (0, 1) and time.monotonic() - t0 < 60
    p = sbx.run("glob", "-t", thread, WS, "**/" * 2000 + "x", timeout=120)
    assert p.returncode in (0, 1)
    assert sbx.sh(thread, "echo alive")["stdout"] == "alive\n"


def test_deep_tree_walks_are_bounded(sbx, prober, thread):
    """10k-level directory trees (far past PATH_MAX): every walk stays bounded and sbx-init
    survives. In /tmp: a scoped sandbox's thread folder outlives it on the host."""
    sbx.sh(thread, "mkdir -p /tmp/deep")
    res, _ = prober.run(thread, "deepdir", "/tmp/deep", 10000, timeout=120)
    assert res["depth"] == "10000"
    pid = sbxsec.sandbox_pid(sbx, thread)
    t0 = time.monotonic()
    p = sbx.run("ls", "-t", thread, "/tmp/deep", "--depth", "256", "--json", timeout=120)
    assert p.returncode == 0 and len(json.loads(p.stdout)["entries"]) == 256
    p = sbx.run("glob", "-t", thread, "/tmp/deep", "**/leaf.txt", "--json", timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["truncated"] is True
    p = sbx.run("grep", "-t", thread, "/tmp/deep", "DEEP-LEAF", "--json", timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["truncated"] is True
    assert time.monotonic() - t0 < 60
    assert sbxsec.sandbox_pid(sbx, thread) == pid
    assert sbx.sh(thread, "echo alive")["stdout"] == "alive\n"


def test_throwaway_deep_tree_is_removed_with_few_descriptors(sbx):
    """`sbx run` removes a throw-away sandbox's files on the host. A tree deeper than the
    front-end's descriptor limit used to defeat that (EMFILE: the state folder leaked and the run
    failed). Regression for the bounded-descriptor sbx__rm_rf_at."""
    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    cmd = sbx.cmd("run", "--", "cd /mnt/user-data && python3 -c \"import os\n"
                  "for i in range(3000):\n    os.mkdir('d'); os.chdir('d')\nprint('made')\"")
    p = subprocess.run(cmd, capture_output=True, timeout=120, preexec_fn=low_nofile)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == b"made"
    sandboxes = os.path.join(sbx.home, "sandboxes")
    assert not os.path.exists(sandboxes) or os.listdir(sandboxes) == []
