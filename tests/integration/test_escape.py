"""Escape attempts from inside a sandbox (issue 2's minimum; the full suite is tests/security).
Each test fails if the escape works."""
import json
import os
import socket
import threading

import pytest

from conftest import thread_dir

WS = "/mnt/user-data/workspace"


@pytest.fixture
def host_secret(tmp_path_factory):
    """A secret file in host places a sandbox must never see."""
    paths = []
    for d in ["/root", "/var/tmp", "/tmp"]:
        p = os.path.join(d, "sbx-host-secret-%d" % os.getpid())
        with open(p, "w") as f:
            f.write("TOPSECRET-HOST\n")
        paths.append(p)
    yield paths
    for p in paths:
        os.unlink(p)


def test_host_files_invisible(sbx, host_secret):
    for p in host_secret:
        r = sbx.sh("t1", "cat %s 2>&1; echo rc=$?" % p)
        assert "TOPSECRET-HOST" not in r["stdout"], p
    r = sbx.sh("t1", "cat /etc/shadow 2>&1; ls /home /root /var 2>&1; cat /etc/passwd")
    assert "TOPSECRET" not in r["stdout"]
    assert "root:x:0:0" in r["stdout"]
    # the generated /etc/passwd, not the host's
    with open("/etc/passwd") as f:
        host_users = [l.split(":")[0] for l in f if not l.startswith(("root:", "nobody:"))]
    for u in host_users:
        assert "\n%s:" % u not in r["stdout"]
    # the state directory and other thread folders are not mounted
    r = sbx.sh("t1", "find / -xdev -name meta -path '*sandboxes*' 2>/dev/null | head; "
               "find / -name ctl.sock 2>/dev/null | head")
    assert r["stdout"] == ""


def test_host_processes_invisible(sbx):
    r = sbx.sh("t1", "ps -eo pid,args --no-headers")
    pids = [int(l.split()[0]) for l in r["stdout"].strip().split("\n")]
    assert pids[0] == 1 and max(pids) < 100
    assert "sbx-init" in r["stdout"].split("\n")[0]
    assert "pytest" not in r["stdout"]
    # and no host pid can be signalled
    r = sbx.sh("t1", "kill -0 %d 2>&1; echo rc=$?" % os.getpid())
    assert r["stdout"].strip().endswith("rc=1")


def test_host_loopback_unreachable(sbx):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    hits = []

    def accept():
        srv.settimeout(5)
        try:
            c, _ = srv.accept()
            hits.append(c)
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    r = sbx.sh("t1", "python3 -c \"import socket; s=socket.socket(); s.settimeout(2); "
               "s.connect(('127.0.0.1', %d)); print('CONNECTED')\" 2>&1; "
               "ip -o link 2>/dev/null || cat /proc/net/dev" % port)
    t.join()
    srv.close()
    assert "CONNECTED" not in r["stdout"]
    assert hits == []
    # only a loopback interface exists
    assert "eth" not in r["stdout"] and "ens" not in r["stdout"]


def test_image_is_read_only(sbx):
    r = sbx.sh("t1", "touch /usr/bin/sbx-pwned 2>&1; echo x > /etc/pwned 2>&1; "
               "mkdir /pwned 2>&1; echo rc=$?")
    assert not os.path.exists("/usr/bin/sbx-pwned")
    assert "Read-only file system" in r["stdout"]
    assert r["stdout"].strip().endswith("rc=1")
    # remounting is impossible (no privilege over the mount namespace)
    r = sbx.sh("t1", "mount -o remount,rw /usr 2>&1; echo rc=$?")
    assert r["stdout"].strip().endswith("rc=32") or "denied" in r["stdout"].lower()


def test_symlink_escapes_through_every_file_op(sbx, host_secret):
    secret = host_secret[0]  # /root/... on the host
    sbx.sh("t1", "ln -s %s %s/link; ln -s / %s/rootlink; ln -s /etc %s/etclink"
           % (secret, WS, WS, WS))
    # read / download / grep / glob / ls through the links: never the host file
    p = sbx.run("read", "-t", "t1", WS + "/link")
    assert p.returncode == 1 and b"TOPSECRET" not in p.stdout
    p = sbx.run("read", "-t", "t1", WS + "/rootlink" + secret)
    assert p.returncode == 1 and b"TOPSECRET" not in p.stdout
    p = sbx.run("download", "-t", "t1", WS + "/link")
    assert p.returncode == 1 and b"TOPSECRET" not in p.stdout
    p = sbx.run("grep", "-t", "t1", WS, "TOPSECRET", "--json")
    assert json.loads(p.stdout)["matches"] == []
    p = sbx.run("grep", "-t", "t1", WS + "/rootlink/root", "TOPSECRET", "--json")
    assert b"TOPSECRET" not in p.stdout
    # writes through links land inside the sandbox, never on the host
    p = sbx.run("write", "-t", "t1", WS + "/rootlink/root/sbx-written-via-link", input=b"x")
    assert not os.path.exists("/root/sbx-written-via-link")
    p = sbx.run("write", "-t", "t1", WS + "/etclink/sbx-pwned", input=b"x")
    assert not os.path.exists("/etc/sbx-pwned")
    # append through a link to a host path
    sbx.run("write", "-t", "t1", WS + "/link", "--append", input=b"APPENDED")
    with open(secret) as f:
        assert f.read() == "TOPSECRET-HOST\n"


def test_dotdot_refused_everywhere(sbx):
    for args in (["read", "-t", "t1", WS + "/../../../etc/passwd"],
                 ["download", "-t", "t1", "/mnt/user-data/../../etc/passwd"],
                 ["write", "-t", "t1", WS + "/../../../tmp/x"],
                 ["upload", "-t", "t1", WS + "/../x"],
                 ["ls", "-t", "t1", WS + "/.."],
                 ["glob", "-t", "t1", WS + "/..", "*"],
                 ["grep", "-t", "t1", WS + "/../..", "root"]):
        p = sbx.run(*args, input=b"x")
        assert p.returncode == 1 and b"path traversal detected" in p.stderr, args


def test_planted_symlink_in_thread_folder_is_not_followed_by_the_host(sbx, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chmod(victim, 0o700)
    sbx.sh("t1", "true")
    # the sandbox replaces its outputs folder with a link to a host path it knows
    sbx.sh("t1", "rm -rf /mnt/user-data/outputs; ln -s %s /mnt/user-data/outputs" % victim)
    sbx.run("rm", "-t", "t1", check=0)
    # the next create prepares the thread folder again: it must refuse, not chown the victim
    p = sbx.run("exec", "-t", "t1", "--", "true")
    st = os.stat(victim)
    assert st.st_uid == 0 and (st.st_mode & 0o777) == 0o700
    assert p.returncode == 1 and b"symlink" in p.stderr


def test_no_new_privileges_and_capabilities(sbx):
    r = sbx.sh("t1", "grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff):' /proc/self/status")
    st = dict(l.split(":\t") for l in r["stdout"].strip().split("\n"))
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    assert int(st["CapBnd"], 16) & (1 << 21) == 0  # no CAP_SYS_ADMIN
    r = sbx.sh("t1", "unshare -U true 2>&1; echo rc=$?; unshare -m true 2>&1; echo rc=$?")
    assert "rc=0" not in r["stdout"]
