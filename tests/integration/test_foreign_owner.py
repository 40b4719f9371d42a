"""Files the host puts in a thread folder (issue 29, point 5; docs/security.md B14): DeerFlow's
gateway writes uploads into user-data/uploads as host root, in a folder whose top libsbx made
(SBX_UID_BASE's). Root inside reads, replaces, updates, appends to and deletes them through the
contract (sbxd's JSON API) and the shell, and nothing the sandbox does hands a file to a host id
it did not belong to: a replaced file is the folder owner's, an appended one stays root's.
A file of a host uid the sandbox does not map fails with its cause in words."""
import base64
import json
import os
import subprocess
import uuid

import pytest

from test_sbxd_http import SBX, sbxd  # noqa: F401 (the fixture)

BASE = 100000  # SBX_UID_BASE: the owner of the folders libsbx makes
UP = "/mnt/user-data/uploads"


def idmaps(home):
    p = subprocess.run([SBX, "--home", str(home), "doctor"], capture_output=True, timeout=120)
    return b"[ok  ] idmapped" in p.stdout


def acquire(sbxd, tmp_path, config=None):  # noqa: F811
    """(op, uploads dir on the host, thread folder on the host): a sandbox acquired through
    sbxd, its uploads folder made by host root after the sandbox exists (as the gateway does)."""
    home = tmp_path / "home"
    home.mkdir()
    if not idmaps(home):
        pytest.skip("the file system of %s cannot idmap (sbx doctor)" % home)
    s = sbxd(home=home, config=config)
    thread = "up-" + uuid.uuid4().hex[:12]
    r = s.req("POST", "/v1/contract/acquire", {"thread": thread})
    assert r.status == 200, r.body
    sid = r.json()["sandbox_id"]
    ud = os.path.join(str(home), "users", "default", "threads", thread, "user-data")
    st = os.lstat(ud)
    assert (st.st_uid, st.st_gid) == (BASE, BASE), st  # as libsbx makes it
    up = os.path.join(ud, "uploads")
    os.makedirs(up, exist_ok=True)
    os.chown(up, 0, 0)  # the gateway's own

    def op(name, body, status=200):
        """The answer of a contract call; status None: any error (4xx, 5xx), its body."""
        r = s.req("POST", "/v1/sandboxes/%s/contract/%s" % (sid, name), body)
        assert r.status == status or (status is None and r.status >= 400), (name, r.status, r.body)
        return r.json()
    return op, up, ud


@pytest.fixture
def upl(sbxd, tmp_path):  # noqa: F811
    return acquire(sbxd, tmp_path)


def host_file(path, text, mode=0o644, uid=0, gid=0):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    os.chown(path, uid, gid)


def owners_ok(ud, pre_root):
    """Every file in the thread folder belongs to the owner or the SBX_UID_BASE range, or to
    root only if it was root's before; none is setuid/setgid."""
    bad = []
    for top, dirs, files in os.walk(ud):
        for n in dirs + files:
            p = os.path.join(top, n)
            st = os.lstat(p)
            for i in (st.st_uid, st.st_gid):
                if not (BASE <= i < BASE + 65536 or (i == 0 and p in pre_root)):
                    bad.append((p, st.st_uid, st.st_gid))
            if st.st_mode & 0o6000 and not os.path.isdir(p):
                bad.append((p, oct(st.st_mode)))
    return bad


def test_root_uploads_are_editable(upl):
    op, up, ud = upl
    docs = {n: os.path.join(up, n) for n in ("doc.txt", "secret.txt", "app.txt", "app2.txt",
                                              "del.txt", "del2.txt")}
    for n, p in docs.items():
        host_file(p, "from %s\n" % n, mode=0o600 if n == "secret.txt" else 0o644)
    pre_root = set(docs.values()) | {up}
    # read, the 0600 one too; they show as nobody (65534) inside, as before
    assert op("read_file", {"path": UP + "/doc.txt"})["content"] == "from doc.txt\n"
    assert op("read_file", {"path": UP + "/secret.txt"})["content"] == "from secret.txt\n"
    r = op("execute_command", {"command": "stat -c '%u:%g' " + UP + "/doc.txt"})
    assert r["stdout"].strip() == "65534:65534", r
    # replace (write_file) and update_file: a new file, the folder owner's; the mode is kept
    op("write_file", {"path": UP + "/doc.txt", "content": "replaced\n"})
    op("update_file", {"path": UP + "/secret.txt",
                       "content_base64": base64.b64encode(b"updated\n").decode()})
    for n, want in (("doc.txt", "replaced\n"), ("secret.txt", "updated\n")):
        st = os.lstat(docs[n])
        assert (st.st_uid, st.st_gid) == (BASE, BASE), (n, st)
        with open(docs[n]) as f:
            assert f.read() == want
    assert os.lstat(docs["secret.txt"]).st_mode & 0o777 == 0o600
    # append (the contract's and the shell's) changes root's file in place: still root's
    op("write_file", {"path": UP + "/app.txt", "content": "more\n", "append": True})
    r = op("execute_command", {"command": "echo shell >> %s/app2.txt && rm %s/del.txt" % (UP, UP)})
    assert r["exit_code"] == 0, r
    for n, want in (("app.txt", "from app.txt\nmore\n"), ("app2.txt", "from app2.txt\nshell\n")):
        st = os.lstat(docs[n])
        assert (st.st_uid, st.st_gid) == (0, 0), (n, st)
        with open(docs[n]) as f:
            assert f.read() == want
    assert not os.path.exists(docs["del.txt"])
    # a move over one of root's, a new file in root's folder, and a delete of the rest
    r = op("execute_command", {"command": "echo n > %s/new.txt && mv -f %s/new.txt %s/del2.txt "
                                          "&& echo m > %s/made.txt && rm %s/secret.txt"
                                          % (UP, UP, UP, UP, UP)})
    assert r["exit_code"] == 0, r
    assert os.lstat(docs["del2.txt"]).st_uid == BASE
    assert os.lstat(os.path.join(up, "made.txt")).st_uid == BASE
    assert not os.path.exists(docs["secret.txt"])
    assert owners_ok(ud, pre_root) == []


def test_unmapped_owner_is_named(upl):
    """A file of a host uid the sandbox does not map (neither root, the owner nor the
    SBX_UID_BASE range) stays out of reach, and the contract says why in words."""
    op, up, ud = upl
    p = os.path.join(up, "other.txt")
    host_file(p, "other\n", uid=4242, gid=4242)
    assert op("read_file", {"path": UP + "/other.txt"})["content"] == "other\n"  # 0644
    for name, body in (("write_file", {"path": UP + "/other.txt", "content": "x"}),
                       ("write_file", {"path": UP + "/other.txt", "content": "x", "append": True}),
                       ("update_file", {"path": UP + "/other.txt", "content_base64": "eA=="})):
        r = op(name, body, status=None)
        assert "does not map" in r["message"] and "Value too large" not in r["message"], r
    st = os.lstat(p)
    assert (st.st_uid, st.st_gid) == (4242, 4242)
    with open(p) as f:
        assert f.read() == "other\n"
    # a folder of that user's: nothing can be written in it, and the error says why
    d = os.path.join(up, "theirs")
    os.mkdir(d, 0o755)
    os.chown(d, 4242, 4242)
    r = op("write_file", {"path": UP + "/theirs/new.txt", "content": "x"}, status=None)
    assert "its folder belongs to a host user" in r["message"], r
    assert os.listdir(d) == []



def test_map_host_root_off(sbxd, tmp_path):  # noqa: F811
    """`map_host_root: false`: host root's files stay unmapped (as before issue 29): a replace
    fails, in words; and no id guard: a command may run as 65534 (which is 165534 on disk
    there)."""
    op, up, ud = acquire(sbxd, tmp_path, "sandbox:\n  map_host_root: false\n")
    ws = "/mnt/user-data/workspace"
    host_file(os.path.join(ud, "workspace", "doc.txt"), "from the gateway\n")
    assert op("read_file", {"path": ws + "/doc.txt"})["content"] == "from the gateway\n"
    r = op("write_file", {"path": ws + "/doc.txt", "content": "x"}, status=None)
    assert "does not map" in r["message"] and "Value too large" not in r["message"], r
    r = op("execute_command", {"command": "setpriv --reuid=65534 --regid=65534 --clear-groups "
                                          "id -u && chown 65534 %s/doc.txt 2>&1; echo $?" % ws})
    assert r["stdout"].split()[0] == "65534", r
    assert r["stdout"].split()[-1] != "0", r  # unmapped: root inside may not chown it either


def test_sbx_init_refuses_setid_and_nobody(sbxd, tmp_path):  # noqa: F811
    """sbx-init's own chmod/chown (OpenSandbox's /files/permissions) obeys the guards its
    commands run under: no setuid/setgid mode, no owner or group 65534 (host root's in the
    folder); an ordinary mode and owner still work."""
    home = tmp_path / "home"
    home.mkdir()
    if not idmaps(home):
        pytest.skip("the file system of %s cannot idmap (sbx doctor)" % home)
    s = sbxd(home=home)
    sb = s.create()
    d = sb.req("GET", "/directories/list?path=/mnt/user-data&depth=0")
    if d.status != 200:
        pytest.skip("an OpenSandbox sandbox without a thread folder: %s" % d.body)
    f = "/mnt/user-data/workspace/f"
    assert sb.req("POST", "/files/permissions", {"/mnt/user-data/workspace": {"mode": 755}}).status == 200
    r = sb.req("POST", "/command", {"command": "echo x > %s" % f})
    assert r.status == 200
    for body in ({"mode": 4755}, {"mode": 2755}, {"owner": "nobody"}, {"group": "nogroup"}):
        r = sb.req("POST", "/files/permissions", {f: body})
        assert r.status >= 400, (body, r.body)
        msg = r.error()[1]
        assert "setuid/setgid" in msg or "host root" in msg, (body, msg)
    assert sb.req("POST", "/files/permissions", {f: {"mode": 640, "owner": "root"}}).status == 200
    # elsewhere (/tmp, not a host folder) 65534 is nobody's: OpenSandbox's own SDK test gives a
    # file there to nobody:nogroup
    assert sb.req("POST", "/command", {"command": "echo y > /tmp/g"}).status == 200
    r = sb.req("POST", "/files/permissions", {"/tmp/g": {"owner": "nobody", "group": "nogroup"}})
    assert r.status == 200, r.body
    out, _ = sb.run("stat -c %u:%g /tmp/g")
    assert out == ["65534:65534"], out
