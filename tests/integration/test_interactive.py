"""Interactive commands: `sbx exec -i`, `sbx exec --tty` and `sbx shell` driven through a real
terminal (tmux: send-keys, capture-pane), and stdin through pipes."""
import os
import shlex
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import SBX

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One tmux server of its own (-L) with one window running a command."""

    def __init__(self, tmp_path, cols=100, rows=30):
        self.sock = "sbxt-" + uuid.uuid4().hex[:10]
        self.tmp = tmp_path
        self.cols, self.rows = cols, rows

    def tm(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null"] + list(args),
                              capture_output=True, text=True, check=check, timeout=30)

    def start(self, command):
        env_cmd = "TERM=xterm-256color " + command
        self.tm("new-session", "-d", "-s", "t", "-x", str(self.cols), "-y", str(self.rows),
                "sh", "-c", env_cmd)
        self.tm("set-option", "-t", "t", "remain-on-exit", "on")

    def keys(self, *keys, literal=False):
        self.tm("send-keys", "-t", "t", *(["-l"] if literal else []), *keys)

    def type(self, text):
        self.keys(text, literal=True)
        self.keys("Enter")

    def screen(self):
        return self.tm("capture-pane", "-p", "-t", "t", "-S", "-200").stdout

    def wait(self, text, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.1)
        raise AssertionError("%r did not appear on the terminal:\n%s" % (text, self.screen()))

    def dead(self):
        r = self.tm("display-message", "-p", "-t", "t", "#{pane_dead}", check=False)
        return r.stdout.strip() == "1"

    def kill(self):
        self.tm("kill-server", check=False)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def sbx_cmd(sbx, *args):
    return " ".join(shlex.quote(a) for a in sbx.cmd(*args))


def test_repl_on_a_terminal(sbx, tmux):
    sbx.ok("exec", "-t", "repl", "--", "true")
    tmux.start(sbx_cmd(sbx, "exec", "-t", "repl", "--tty", "--", "python3 -i -q") +
               "; echo SBX-EXITED:$?")
    tmux.wait(">>>")
    tmux.type("import os, sys; print(os.isatty(0), 6 * 7)")
    tmux.wait("True 42")
    tmux.type("raise SystemExit(3)")
    tmux.wait("SBX-EXITED:3")


def test_ctrl_c_reaches_the_foreground_job_not_sbx(sbx, tmux):
    tmux.start(sbx_cmd(sbx, "exec", "-t", "cc", "--tty", "--", "bash --norc -i") +
               "; echo SBX-EXITED:$?")
    tmux.wait("bash-")
    tmux.type("sleep 100; echo slept")
    time.sleep(0.5)
    tmux.keys("C-c")
    tmux.type("echo alive-$((40 + 2))")
    s = tmux.wait("alive-42")
    assert "slept" not in s.replace("echo slept", "")
    assert "SBX-EXITED" not in s
    tmux.type("exit 5")
    tmux.wait("SBX-EXITED:5")


def test_resize_seen_by_stty_size(sbx, tmux):
    tmux.start(sbx_cmd(sbx, "shell", "-t", "rs") + "; echo SBX-EXITED:$?")
    tmux.type("stty size")
    tmux.wait("%d %d" % (tmux.rows, tmux.cols))
    tmux.tm("resize-window", "-t", "t", "-x", "120", "-y", "40")
    time.sleep(0.3)
    tmux.type("clear; stty size")
    tmux.wait("40 120")
    # the resize reached the foreground program as SIGWINCH, too
    tmux.type("trap 'echo GOT-WINCH' WINCH; sleep 1 & wait")
    time.sleep(0.2)
    tmux.tm("resize-window", "-t", "t", "-x", "90", "-y", "25")
    tmux.wait("GOT-WINCH")
    tmux.type("exit 0")
    tmux.wait("SBX-EXITED:0")


def test_shell_is_a_login_shell_in_the_workspace(sbx, tmux):
    tmux.start(sbx_cmd(sbx, "shell", "-t", "sh1") + "; echo SBX-EXITED:$?")
    tmux.type("echo where=$(pwd) tty=$(tty) login=$(shopt -q login_shell && echo yes)")
    tmux.wait("where=/mnt/user-data/workspace tty=/dev/pts/")
    tmux.wait("login=yes")
    tmux.keys("C-d")
    tmux.wait("SBX-EXITED:0")


@pytest.mark.parametrize("how", ["command-killed", "sbx-terminated"])
def test_terminal_restored(sbx, tmux, tmp_path, how):
    before, after = tmp_path / "before", tmp_path / "after"
    sbx.ok("exec", "-t", "rst", "--", "true")
    tmux.start("stty -g > %s; %s; echo SBX-EXITED:$?; stty -g > %s" %
               (before, sbx_cmd(sbx, "exec", "-t", "rst", "--tty", "--", "echo READY; sleep 300"),
                after))
    tmux.wait("READY")
    raw = subprocess.run(["tmux", "-L", tmux.sock, "display-message", "-p", "-t", "t",
                          "#{pane_tty}"], capture_output=True, text=True).stdout.strip()
    mode = subprocess.run(["stty", "-a", "-F", raw], capture_output=True, text=True).stdout
    assert "-icanon" in mode and "-echo " in mode, mode  # ours is raw while the command runs
    if how == "command-killed":
        sbx.run("exec", "-t", "rst", "--", "pkill -KILL -x sleep", check=0)
        tmux.wait("SBX-EXITED:137")
    else:
        pid = subprocess.run(["pgrep", "-f", "^" + SBX + " .*rst --tty"], capture_output=True,
                             text=True).stdout.split()
        assert pid
        for p in pid:
            os.kill(int(p), 15)
        tmux.wait("SBX-EXITED:")
    deadline = time.time() + 10
    while not (after.exists() and after.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    assert after.read_text() == before.read_text()


def test_stdin_binary_exact(sbx, tmp_path):
    data = os.urandom(3 << 20) + bytes(range(256)) * 4
    p = sbx.run("exec", "-t", "bin", "-i", "--", "cat", input=data, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == data
    p = sbx.run("exec", "-t", "bin", "-i", "--", "sha256sum | cut -c1-64", input=data)
    import hashlib
    assert p.stdout.decode().strip() == hashlib.sha256(data).hexdigest()


def test_stdin_eof_ends_cat(sbx):
    p = sbx.run("exec", "-t", "eof", "-i", "--", "cat; echo after-eof", input=b"line\n", timeout=30)
    assert p.returncode == 0
    assert p.stdout == b"line\nafter-eof\n"
    # a command that does not read its stdin still finishes, and its output all arrives
    big = b"x" * (4 << 20)
    p = sbx.run("exec", "-t", "eof", "-i", "--", "head -c 1000000 /dev/zero | wc -c", input=big,
                timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == b"1000000"


def test_stdin_command_output_while_input_flows(sbx):
    # output and input flowing at once, both larger than any pipe or socket buffer
    data = os.urandom(8 << 20)
    p = sbx.run("exec", "-t", "dup", "-i", "--", "tee /dev/stderr", input=data, timeout=120)
    assert p.returncode == 0, p.stderr[-300:]
    assert p.stdout == data and p.stderr == data


def test_signal_to_sbx_reaches_the_command(sbx, tmp_path):
    proc = subprocess.Popen(sbx.cmd("exec", "-t", "sig", "-i", "--",
                                    "trap 'echo got-int; exit 7' INT; echo ready; cat"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    # stdin stays open: only the signal can end cat. It is sent again until it does: the first
    # may reach the shell before it has started cat (the shell then waits for cat to end).
    deadline = time.time() + 20
    while proc.poll() is None and time.time() < deadline:
        proc.send_signal(2)
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
    out = proc.stdout.read()
    proc.stdin.close()
    assert out == b"got-int\n"
    assert proc.returncode == 7


def test_bad_input(sbx):
    p = sbx.run("exec", "-t", "bad", "-i", "--json", "--", "true")
    assert p.returncode == 2 and b"--json" in p.stderr
    assert sbx.ps() == []  # nothing was created


def test_tty_without_a_terminal_is_refused(sbx):
    # docker's "the input device is not a TTY": a terminal fed from a pipe lost the pipe's end
    # on a cold sandbox (the ^D reached bash before readline's raw mode: it waited forever)
    for args in (["--tty"], ["-T", "-e", "A=1"]):
        p = sbx.run("exec", "-t", "nt", *args, "--", "bash", input=b"echo hi\n", timeout=30)
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        assert b"--tty needs a terminal on stdin" in p.stderr and b"-i" in p.stderr, p.stderr
        assert p.stdout == b""
    assert sbx.ps() == []  # nothing was created
    # -i is the way to feed a command from a pipe; on a terminal, --tty works
    p = sbx.run("exec", "-t", "nt", "-i", "--", "bash", input=b"echo hi\n", timeout=30)
    assert (p.returncode, p.stdout) == (0, b"hi\n"), p.stderr
    p = sbx.run("exec", "-t", "nt", "--tty", "--", "tty", timeout=30, tty=True)
    assert p.returncode == 0 and b"/dev/pts/" in p.stdout, p.stdout


def test_tty_background_job_does_not_hold_the_exit(sbx):
    # a job left writing to the terminal without pause: the command's EXIT still comes
    t0 = time.time()
    p = sbx.run("exec", "-t", "bg", "--tty", "--", "(trap '' HUP; exec yes) & echo started",
                input=b"", timeout=30, tty=True)
    assert p.returncode == 0, p.stderr
    assert b"started" in p.stdout
    assert time.time() - t0 < 15
    sbx.run("exec", "-t", "bg", "--", "pkill -x yes")


def test_tty_exit_status_and_signal(sbx):
    p = sbx.run("exec", "-t", "st", "--tty", "--", "exit 42", timeout=30, tty=True)
    assert p.returncode == 42
    p = sbx.run("exec", "-t", "st", "--tty", "--", "kill -TERM $$", timeout=30, tty=True)
    assert p.returncode == 128 + 15
