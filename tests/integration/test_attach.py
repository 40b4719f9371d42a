"""`sbx attach` on a real terminal (tmux) to a PTY session of a real sbxd: keys and output, the
terminal's size, docker's detach keys (^P ^Q) leaving the session running, reattaching with
--since, ^P followed by another key passing through, and the command's exit status."""
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from conftest import SBX, SOURCE
from test_interactive import Tmux, tmux  # noqa: F401 (a fixture)
from test_sbxd_http import KEY, sbxd  # noqa: F401 (a fixture)


def attach_cmd(tmp_path, s, sb, sid, *extra):
    argv = [SBX, "--home", str(tmp_path / "cli-home"), "attach", "--server",
            "%s:%d" % (s.host, s.port), *extra, sb.id, sid]
    return ("OPEN_SANDBOX_API_KEY=%s " % KEY + " ".join(shlex.quote(a) for a in argv) +
            "; echo SBX-EXITED:$?")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_attach_detach_reattach(sbxd, tmux, tmp_path):  # noqa: F811
    s = sbxd()
    sb = s.create()
    r = sb.req("POST", "/pty", {"cwd": "/tmp"})
    assert r.status == 201, r.body
    sid = r.json()["session_id"]

    tmux.start(attach_cmd(tmp_path, s, sb, sid))
    tmux.type("echo one-$((40+2)); pwd")
    tmux.wait("one-42")
    tmux.type("stty size")
    tmux.wait("%d %d" % (tmux.rows, tmux.cols))  # our terminal's size reached the session
    tmux.type("sleep 600")
    time.sleep(0.3)
    tmux.keys("C-p")
    tmux.keys("C-q")
    screen = tmux.wait("SBX-EXITED:0")
    m = re.search(r"detached from \S+ at offset (\d+) \(sbx attach --since (\d+) ", screen)
    assert m, screen
    offset = int(m.group(1))
    st = sb.req("GET", "/pty/" + sid).json()
    assert st["running"] is True and st["output_offset"] == offset

    # again, from the offset: nothing old is replayed; ^C still reaches the sleep
    t2 = Tmux(tmp_path)
    try:
        t2.start(attach_cmd(tmp_path, s, sb, sid, "--since", str(offset)))
        time.sleep(0.5)
        t2.keys("C-c")
        t2.type("echo two-$((1+1))")
        t2.wait("two-2")
        assert "one-42" not in t2.screen()
        # ^P and another key: both go to the session (cat -v shows them)
        t2.type("cat -v")
        time.sleep(0.3)
        t2.keys("C-p")
        t2.keys("x")
        t2.keys("Enter")
        t2.wait("^Px")
        t2.keys("C-d")
        t2.type("exit 5")
        t2.wait("SBX-EXITED:5")
    finally:
        t2.kill()
    assert sb.req("GET", "/pty/" + sid).json()["running"] is False


def test_attach_errors(sbxd, tmp_path):  # noqa: F811
    s = sbxd()
    sb = s.create()
    env = {"OPEN_SANDBOX_API_KEY": KEY, "PATH": "/usr/bin:/bin"}
    base = [SBX, "--home", str(tmp_path / "cli-home"), "attach", "--server",
            "%s:%d" % (s.host, s.port)]
    p = subprocess.run(base + [sb.id, "nope"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1
    assert "404" in p.stderr and "CONTEXT_NOT_FOUND" in p.stderr, p.stderr
    p = subprocess.run(base + ["--since", "-1", sb.id, "x"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2 and "--since" in p.stderr, p.stderr
    sid = sb.req("POST", "/pty", {}).json()["session_id"]
    p = subprocess.run(base + [sb.id, sid], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 1 and "401" in p.stderr, p.stderr  # no key, no token


def readme_pty_block():
    """The README's PTY example: the sh block that runs `sbx attach`."""
    with open(os.path.join(SOURCE, "README.md")) as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    return next(b for b in blocks if "sbx attach $ID $SESSION" in b)


def test_readme_pty_example_against_a_keyless_server(sbxd, tmp_path):  # noqa: F811
    """The README's commands against the README's server (make run: no key, on loopback)."""
    s = sbxd(api_key=None)
    block = readme_pty_block().replace("http://127.0.0.1:8080", "http://%s:%d" % (s.host, s.port))
    setup = block[:block.index("sbx attach")]
    p = subprocess.run(["bash", "-euc", setup + 'echo "$ID $SESSION"'], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    box, sid = p.stdout.split()
    try:
        # the positive control: the session's route wants the token (a keyless server too)
        c = s.conn()
        c.request("GET", "/direct/%s/44772/pty/%s/ws" % (box, sid),
                  headers={"Upgrade": "websocket", "Connection": "Upgrade",
                           "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        assert c.getresponse().status == 401
        c.close()
        # `sbx attach $ID $SESSION` as the README has it (our port instead of 8080)
        argv = [SBX, "--home", str(tmp_path / "cli-home"), "attach", "--server",
                "%s:%d" % (s.host, s.port), box, sid]
        p = subprocess.run(argv, input="echo hi-$((6*7)); exit 3\n", capture_output=True,
                           text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        assert p.returncode == 3, p.stderr
        assert "hi-42" in p.stdout
    finally:
        assert s.req("DELETE", "/v1/sandboxes/" + box, key=None).status == 204
