"""Idmapped folders (issue 16, point 4; docs/security.md B11-B13): what a sandbox writes in a
thread folder or a read-write volume belongs on the host to the folder's owner, through an
idmapped mount that maps the sandbox's root (the first id of its own range) to that owner. The
guard that goes with it: a sandbox writing as a host user's ids may not make setuid/setgid
files or file capabilities there, and no other sandbox reaches the folder."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

import sbxsec
from sbxsec import WS

USER = 1000  # the harness's own uid (DeerFlow's gateway runs as a user of its own)


def as_user(*argv):
    """argv run as uid/gid USER (no groups): the harness that owns the folder."""
    return subprocess.run(["setpriv", "--reuid=%d" % USER, "--regid=%d" % USER,
                           "--clear-groups", "--"] + list(argv), capture_output=True, text=True,
                          timeout=30)


def user_thread(s, prefix):
    """A thread whose user-data folder the harness made and owns (uid USER), before any
    sandbox of it exists."""
    t = sbxsec.new_thread(prefix)
    d = sbxsec.thread_dir(s, t)
    os.makedirs(d)
    for p in (d, os.path.dirname(d)):
        os.chmod(p, 0o755)
    os.chown(d, USER, USER)
    return t, d


@pytest.fixture
def s(request):
    # not below pytest's tmp_path (/tmp/pytest-of-root is 0700): the harness user reaches it
    home = tempfile.mkdtemp(prefix="sbx-idmap-", dir="/tmp")
    os.chmod(home, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    sb = sbxsec.Sbx(home)
    request.addfinalizer(sb.down)
    if not idmaps(sb):  # tmpfs before 6.3 (a guest's /tmp): what the last test covers
        pytest.skip("the file system of %s cannot idmap (sbx doctor)" % home)
    return sb


def idmaps(sb):
    out = sb.run("doctor").stdout.decode()
    return "[ok  ] idmapped" in out


def test_files_belong_to_the_folders_owner(s):
    t, d = user_thread(s, "owned")
    r = s.sh(t, "echo x > %s/f && mkdir %s/d && echo y > %s/d/g && chown 5:5 %s/d/g && "
                "stat -c '%%u %%g' /mnt/user-data %s/f && cat /proc/self/uid_map" % (
                    WS, WS, WS, WS, WS))
    out = r["stdout"].split()
    # root inside owns the folder and what it writes; the sandbox still runs under its range
    assert out[:4] == ["0", "0", "0", "0"] and out[4] == "0" and int(out[5]) >= 0x10000000, r
    ws = os.path.join(d, "workspace")
    for p in (ws, os.path.join(ws, "f"), os.path.join(ws, "d")):
        st = os.lstat(p)
        assert (st.st_uid, st.st_gid) == (USER, USER), (p, st)
    # another id inside is that id above 100000 on disk, as before (never the sandbox's range)
    st = os.lstat(os.path.join(ws, "d", "g"))
    assert (st.st_uid, st.st_gid) == (100005, 100005), st
    # the harness edits and deletes what the sandbox wrote
    r = as_user("sh", "-c", "echo z >> %s/f && rm -f %s/d/g && rm -r %s/d %s/f" % (ws, ws, ws, ws))
    assert r.returncode == 0, r.stderr
    assert os.listdir(ws) == []


def test_default_folders_keep_the_shared_owner(s):
    """Positive control: a thread folder libsbx makes stays 100000's, which the harness user
    cannot delete from (what the test above fixes for a folder the harness owns)."""
    t = sbxsec.new_thread("default")
    s.sh(t, "echo x > %s/f" % WS)
    ws = os.path.join(sbxsec.thread_dir(s, t), "workspace")
    st = os.lstat(os.path.join(ws, "f"))
    assert (st.st_uid, st.st_gid) == (100000, 100000), st
    r = as_user("rm", "-f", os.path.join(ws, "f"))
    assert r.returncode != 0 and os.path.exists(os.path.join(ws, "f")), r


def test_root_owned_volume_is_writable(request, tmp_path):
    if not idmaps(sbxsec.Sbx(str(tmp_path))):
        pytest.skip("the file system of %s cannot idmap (sbx doctor)" % tmp_path)
    vol = tmp_path / "vol"
    vol.mkdir()
    os.chmod(vol, 0o755)
    (vol / "old").write_text("host\n")
    home = tmp_path / "home-vol"
    home.mkdir()
    cfg = tmp_path / "vol.yaml"
    cfg.write_text("sandbox:\n  mounts:\n    - host_path: %s\n      container_path: /mnt/vol\n"
                   "    - host_path: %s\n      container_path: /mnt/ro\n      read_only: true\n"
                   % (vol, vol))
    s = sbxsec.Sbx(home, str(cfg))
    request.addfinalizer(s.down)
    t = sbxsec.new_thread("vol")
    r = s.sh(t, "echo new > /mnt/vol/new && echo more >> /mnt/vol/old && stat -c '%u' /mnt/vol/new"
                " && (echo no > /mnt/ro/x 2>/dev/null && echo ro-writable || echo ro-refused)")
    assert r["exit_code"] == 0 and r["stdout"].split() == ["0", "ro-refused"], r
    st = os.lstat(vol / "new")
    assert (st.st_uid, st.st_gid) == (0, 0), st
    assert (vol / "old").read_text() == "host\nmore\n"


GUARD = r'''
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
d = sys.argv[1]
def res(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
p = os.path.join(d, "t")
with open("/bin/true", "rb") as src, open(p, "wb") as dst:
    dst.write(src.read())
out = {
    "chmod_plain": res(lambda: os.chmod(p, 0o755)),
    "chmod_suid": res(lambda: os.chmod(p, 0o4755)),
    "chmod_sgid": res(lambda: os.chmod(p, 0o2755)),
    "create_suid": res(lambda: os.close(os.open(os.path.join(d, "c"), os.O_CREAT | os.O_WRONLY, 0o4755))),
    "mknod_suid": res(lambda: os.mknod(os.path.join(d, "n"), 0o104755)),
    # a v2 security.capability with cap_setuid permitted and effective
    "setcap": res(lambda: os.setxattr(p, "security.capability",
                                      bytes.fromhex("01000002" "80000000" "00000000" "00000000" "00000000"))),
}
libc.syscall.restype = ctypes.c_long
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
r = libc.syscall(437, -100, os.path.join(d, "o2").encode(), how, ctypes.c_size_t(24))
out["openat2"] = "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
for k, v in out.items():
    print(k, v)
'''


def test_setid_guard(s):
    """The sandbox's root is the folder owner's (uid 1000's) there: a setuid file it made would
    be a setuid binary of uid 1000's on the host, where the sandbox's nosuid does not apply
    (the kernel lets an owner set S_ISUID without any capability, and writes a file capability
    for the sandbox's root as one for the on-disk owner). Commands of such a sandbox get no
    S_ISUID/S_ISGID modes, no CAP_SETFCAP, and openat2 is ENOSYS (its mode is out of seccomp's
    sight). The same probe in a sandbox of a default folder is the positive control."""
    t, d = user_thread(s, "guard")
    s.run("upload", "-t", t, WS + "/guard.py", input=GUARD.encode(), check=0)
    got = sbxsec.parse_results(s.sh(t, "python3 %s/guard.py %s" % (WS, WS))["stdout"])
    assert got == {"chmod_plain": "ok", "chmod_suid": "EPERM", "chmod_sgid": "EPERM",
                   "create_suid": "EPERM", "mknod_suid": "EPERM", "setcap": "EPERM",
                   "openat2": "ENOSYS"}, got
    ws = os.path.join(d, "workspace")
    for name in os.listdir(ws):
        st = os.lstat(os.path.join(ws, name))
        assert not st.st_mode & 0o6000, (name, oct(st.st_mode))
        assert st.st_uid == USER
    # positive control: without the guard (a throw-away sandbox: no host folder at all) the
    # probe succeeds, so the refusals above are the guard's. (A default folder, 100000's, is
    # guarded too since host root's files are mapped there: test_foreign_id_guard.)
    p = s.run("run", "-i", "--", "cat > /tmp/guard.py && python3 /tmp/guard.py /tmp",
              input=GUARD.encode(), check=0)
    got = sbxsec.parse_results(p.stdout.decode())
    assert got["chmod_suid"] == "ok" and got["create_suid"] == "ok" and got["setcap"] == "ok", got
    assert got["openat2"] == "ok", got


IDS = r'''
import ctypes, errno, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
d, f = sys.argv[1], sys.argv[2]
def res(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
def sc(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_ulong(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
def child(fn):
    """fn in a child (a uid change is for good): its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, fn().encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return os.read(r, 100).decode()
def sh(cmd):
    return "ok" if subprocess.run(cmd, shell=True, capture_output=True).returncode == 0 else "fail"
NR = {"setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123}  # x86_64
out = {
    "setpriv": sh("setpriv --reuid=65534 --regid=65534 --clear-groups touch %s/by-nobody" % d),
    "setpriv_uid": sh("setpriv --reuid=65534 touch %s/by-nobody-u" % d),
    "setpriv_gid": sh("setpriv --regid=65534 --clear-groups touch %s/by-nobody-g" % d),
    "chown": sh("chown 65534:65534 %s" % f),
    "chown_u": sh("chown 65534 %s" % f),
    "chgrp": sh("chgrp 65534 %s" % f),
    "os_chown": res(lambda: os.chown(f, 65534, -1)),
    "os_lchown": res(lambda: os.lchown(f, -1, 65534)),
    "setresuid": child(lambda: res(lambda: os.setresuid(65534, 65534, 65534))),
    "setresgid": child(lambda: res(lambda: os.setresgid(65534, 65534, 65534))),
    "setuid": child(lambda: res(lambda: os.setuid(65534))),
    "setreuid": child(lambda: res(lambda: os.setreuid(-1, 65534))),
    "setegid": child(lambda: res(lambda: os.setegid(65534))),
    # the kernel takes 32 bits: high bits set must not slip 65534 past the filter
    "setresuid_hi": child(lambda: sc("setresuid", NR["setresuid"], 0xffffffff0000fffe,
                                     0xffffffff0000fffe, 0xffffffff0000fffe)),
    "setfsuid": child(lambda: (sc("setfsuid", NR["setfsuid"], 65534), os.close(os.open(
        d + "/by-fsuid", os.O_CREAT | os.O_WRONLY)))[0]),
    # what stays allowed: no change (-1), and root's own ids
    "chown_nochange": res(lambda: os.chown(f, -1, -1)),
    "setresuid_nochange": child(lambda: res(lambda: os.setresuid(-1, -1, -1))),
    "setuid_other": child(lambda: res(lambda: os.setuid(1000))),
}
for k, v in out.items():
    print(k, v)
'''


def root_owned(top, pre):
    """Files and folders below top that belong to host root (uid or gid 0), but for pre."""
    found = []
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if (st.st_uid == 0 or st.st_gid == 0) and p not in pre:
                found.append((p, st.st_uid, st.st_gid))
    return found


def test_foreign_id_guard(s, request, tmp_path):
    """Host root's files in a folder libsbx made (100000's) are mapped as nobody (65534) inside,
    so that root inside may edit the uploads a gateway running as root wrote there (ids.c's
    foreign owner's slot). A process acting as 65534 would then write as host root: no command
    may take that id (setpriv, set*id in any form, setfsuid) nor give it to a file (chown), and
    no file of host root appears. The positive control: the same probe in a throw-away sandbox
    (no thread folder) whose only folder, a volume, belongs to root (no foreign slot there:
    65534 is 165534 on disk) succeeds."""
    t = sbxsec.new_thread("foreign")
    s.sh(t, "true")
    ws = os.path.join(sbxsec.thread_dir(s, t), "workspace")
    f = os.path.join(ws, "upload.txt")
    with open(f, "w") as fh:
        fh.write("from the gateway\n")  # host root's, as DeerFlow's gateway writes uploads
    s.run("upload", "-t", t, "/tmp/ids.py", input=IDS.encode(), check=0)
    r = s.sh(t, "stat -c '%%u:%%g' %s/upload.txt && echo more >> %s/upload.txt && "
                "python3 /tmp/ids.py %s %s/upload.txt" % (WS, WS, WS, WS))
    lines = r["stdout"].split("\n", 1)
    assert lines[0] == "65534:65534", r  # mapped: root inside appended to it below
    got = sbxsec.parse_results(lines[1])
    refused = ["setpriv", "setpriv_uid", "setpriv_gid", "chown", "chown_u", "chgrp"]
    assert {k: got.get(k) for k in refused} == {k: "fail" for k in refused}, got
    eperm = ["os_chown", "os_lchown", "setresuid", "setresgid", "setuid", "setreuid", "setegid",
             "setresuid_hi", "setfsuid"]
    assert {k: got.get(k) for k in eperm} == {k: "EPERM" for k in eperm}, got
    assert got["chown_nochange"] == "ok" and got["setresuid_nochange"] == "ok", got
    assert got["setuid_other"] == "ok", got
    with open(f) as fh:
        assert fh.read() == "from the gateway\nmore\n"
    assert (os.lstat(f).st_uid, os.lstat(f).st_gid) == (0, 0)  # appended in place: still root's
    assert root_owned(sbxsec.thread_dir(s, t), {f}) == [], r
    assert not os.path.exists(os.path.join(ws, "by-nobody")), r
    # the CLI's write replaces root's file: a new one, the folder owner's (100000's)
    s.run("write", "-t", t, WS + "/upload.txt", input=b"by the agent\n", check=0)
    with open(f) as fh:
        assert fh.read() == "by the agent\n"
    assert (os.lstat(f).st_uid, os.lstat(f).st_gid) == (100000, 100000)

    # positive control: a root-owned volume maps root to root, so nothing is host root's as
    # 65534 there and the id guard is off: the same probe takes 65534 (165534 on disk)
    vol = tmp_path / "vol"
    vol.mkdir()
    os.chmod(vol, 0o777)  # nobody may write there
    vf = vol / "upload.txt"
    vf.write_text("host\n")
    home = tmp_path / "home-ctl"
    home.mkdir()
    cfg = tmp_path / "vol.yaml"
    cfg.write_text("sandbox:\n  mounts:\n    - host_path: %s\n      container_path: /mnt/vol\n"
                   % vol)
    c = sbxsec.Sbx(home, str(cfg))
    request.addfinalizer(c.down)
    r = c.run("run", "-i", "--", "cat > /tmp/ids.py && python3 /tmp/ids.py /mnt/vol "
              "/mnt/vol/upload.txt", input=IDS.encode(), check=0).stdout.decode()
    got = sbxsec.parse_results(r)
    assert got["setpriv"] == "ok" and got["setresuid"] == "ok" and got["chown"] == "ok", (got, r)
    assert got["setresuid_hi"] == "ok" and got["setfsuid"] == "ok", (got, r)
    for n in ("by-nobody", "by-fsuid", "upload.txt"):  # 65534 inside is 165534 there
        st = os.lstat(vol / n)
        assert (st.st_uid, st.st_gid) == (165534, 165534 if n != "by-fsuid" else 0), (n, st)


def test_other_sandboxes_cannot_reach_the_folder(s):
    """Two threads whose folders the same user owns: each sandbox writes as that owner in its
    own folder only; the other's is mounted nowhere in it, and their host id ranges differ."""
    a, da = user_thread(s, "mine")
    b, db = user_thread(s, "other")
    s.sh(a, "echo secret > %s/marker" % WS)
    r = s.sh(b, "ls /mnt/user-data/workspace; cat /proc/self/uid_map; "
                "grep -c user-data /proc/self/mountinfo; "
                "find / -xdev -name marker 2>/dev/null | head -1")
    out = r["stdout"].split()
    assert "marker" not in r["stdout"], r
    assert out[3] == "1", r  # one user-data mount: its own
    ra = s.sh(a, "cat /proc/self/uid_map")["stdout"].split()
    assert abs(int(ra[1]) - int(out[1])) >= 65536, (ra, out)
    # positive control: the marker is there, in a's folder, readable by a
    assert s.sh(a, "cat %s/marker" % WS)["stdout"] == "secret\n"
    assert os.lstat(os.path.join(da, "workspace", "marker")).st_uid == USER
    assert os.listdir(os.path.join(db, "workspace")) == []


def test_doctor_and_the_fallback_where_nothing_idmaps(request):
    """ramfs has no idmapped mounts (nor have NFS, most FUSE, tmpfs before 6.3): a sandbox
    with its thread folder there falls back to the shared ids 100000.. (today's files, owned
    by 100000) with a warning naming the reason, and `sbx doctor` says so for that home. The
    same doctor check on an ext4/tmpfs home is the positive control."""
    home = tempfile.mkdtemp(prefix="sbx-ramfs-", dir="/tmp")
    subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0755", "sbx-test-ramfs", home],
                   check=True)

    def cleanup():
        subprocess.run(["umount", "-l", home])
        os.rmdir(home)
    request.addfinalizer(cleanup)
    s = sbxsec.Sbx(home)
    request.addfinalizer(s.down)
    out = s.run("doctor").stdout.decode()
    line = [l for l in out.splitlines() if "idmapped" in l]
    assert line and line[0].startswith("[warn]") and "cannot idmap" in line[0], out
    # the control: /tmp idmaps unless it is a tmpfs before Linux 6.3
    tmpfs = subprocess.run(["stat", "-f", "-c", "%T", "/tmp"], capture_output=True,
                           text=True).stdout.strip() == "tmpfs"
    if not tmpfs or tuple(int(x) for x in os.uname().release.split(".")[:2]) >= (6, 3):
        assert idmaps(sbxsec.Sbx(tempfile.gettempdir()))
    t = sbxsec.new_thread("ramfs")
    p = s.run("exec", "-t", t, "--json", "--",
              "echo x > %s/f && cat /proc/self/uid_map" % WS)
    r = json.loads(p.stdout)
    assert r["exit_code"] == 0 and r["stdout"].split()[1] == "100000", r
    st = os.lstat(os.path.join(sbxsec.thread_dir(s, t), "workspace", "f"))
    assert (st.st_uid, st.st_gid) == (100000, 100000), st
    assert b"shared host ids" not in p.stderr, p.stderr  # 100000's folder: as if idmapped
    # a folder the harness owns: not writable by root inside there, and the caller is told
    u, d = user_thread(s, "ramfs-user")
    p = s.run("exec", "-t", u, "--json", "--", "echo x > %s/f" % WS)
    r = json.loads(p.stdout)
    assert r["exit_code"] != 0 and not os.path.exists(os.path.join(d, "workspace", "f")), r
    assert b"shared host ids 100000" in p.stderr and d.encode() in p.stderr, p.stderr
