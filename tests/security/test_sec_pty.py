"""Terminals: what a command running on a sandbox terminal (`sbx exec --tty`, `sbx shell`) can
do to the terminal of whoever started it, and to the host's pseudo-terminal pool. Each attack
has a positive control showing that the same move works where it is allowed (inside)."""
import os
import shlex
import shutil
import subprocess
import time
import uuid

import pytest

from sbxsec import SBX, new_thread, on_a_terminal

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

INJECT = ("import fcntl, termios, sys\n"
          "line = sys.argv[1].encode() + b'\\n'\n"
          "for c in line:\n"
          "    fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\n"
          "print('INJECTED', flush=True)\n")


class Pane:
    def __init__(self):
        self.sock = "sbxs-" + uuid.uuid4().hex[:10]

    def tm(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null"] + list(args),
                              capture_output=True, text=True, check=check, timeout=30)

    def start(self):
        # an interactive host shell: if anything is pushed into this terminal's input, it runs it
        self.tm("new-session", "-d", "-s", "t", "-x", "120", "-y", "40", "env", "PS1=host$ ",
                "TERM=xterm", "sh", "-i")

    def type(self, text):
        self.tm("send-keys", "-t", "t", "-l", text)
        self.tm("send-keys", "-t", "t", "Enter")

    def wait(self, text, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.tm("capture-pane", "-p", "-t", "t", "-S", "-300").stdout
            if text in s:
                return s
            time.sleep(0.1)
        raise AssertionError("%r not on the terminal:\n%s" % (text, s))


@pytest.fixture
def pane():
    p = Pane()
    p.start()
    yield p
    p.tm("kill-server", check=False)


def sbx_line(sbx, *args):
    return " ".join(shlex.quote(str(a)) for a in sbx.cmd(*args))


def test_tiocsti_does_not_reach_the_callers_terminal(sbx, pane, tmp_path):
    t = new_thread("sti")
    sbx.ok("exec", "-t", t, "--", "true")
    host_marker = tmp_path / "pwned"
    # positive control: on its own terminal, the command can push input that a shell there runs
    inside = ("python3 -c %s 'touch /tmp/sti-inside; exit' && exec sh" % shlex.quote(INJECT))
    pane.type(sbx_line(sbx, "exec", "-t", t, "--tty", "--", inside) + "; echo CONTROL-$((1+1))-DONE")
    pane.wait("CONTROL-2-DONE")
    assert sbx.run("exec", "-t", t, "--", "test -e /tmp/sti-inside").returncode == 0
    # the attack: push a command line and exit, hoping the caller's shell reads it next
    attack = "python3 -c %s %s" % (shlex.quote(INJECT), shlex.quote("touch %s" % host_marker))
    pane.type(sbx_line(sbx, "exec", "-t", t, "--tty", "--", attack) + "; echo ATTACK-$((1+1))-DONE")
    pane.wait("ATTACK-2-DONE")
    pane.type("echo SETTLED-$((6*7))")
    pane.wait("SETTLED-42")
    time.sleep(0.5)
    assert not host_marker.exists()


def test_tioclinux_and_consoles_are_out_of_reach(sbx):
    t = new_thread("tl")
    probe = ("import fcntl, os, termios\n"
             "try:\n"
             "    fcntl.ioctl(0, 0x541C, bytes([6]))  # TIOCLINUX, TIOCL_GETSHIFTSTATE\n"
             "    print('TIOCLINUX-WORKED')\n"
             "except OSError as e:\n"
             "    print('TIOCLINUX-ERRNO', e.errno)\n"
             "print('TTY', os.ttyname(0))\n"
             "for d in ('/dev/tty0', '/dev/tty1', '/dev/console', '/dev/vcs', '/dev/vcsa'):\n"
             "    print(d, os.path.exists(d))\n")
    p = sbx.run("exec", "-t", t, "--tty", "--", "python3 -c %s" % shlex.quote(probe), timeout=60,
                tty=True)
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr
    assert "TTY /dev/pts/" in out  # control: the ioctl was made on a real terminal
    assert "TIOCLINUX-ERRNO" in out and "TIOCLINUX-WORKED" not in out, out
    for d in ('/dev/tty0', '/dev/tty1', '/dev/console', '/dev/vcs', '/dev/vcsa'):
        assert "%s False" % d in out, out


def test_sbx_init_bounds_terminals_per_sandbox(sbx):
    t = new_thread("many")
    sbx.ok("exec", "-t", t, "--", "true")
    held = []
    try:
        for i in range(32):
            held.append(subprocess.Popen(on_a_terminal(sbx.cmd("exec", "-t", t, "--tty", "--",
                                                               "echo up; exec sleep 120")),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        for h in held:
            assert h.stdout.readline().strip() == b"up"
        p = sbx.run("exec", "-t", t, "--tty", "--", "echo should-not-run", timeout=60, tty=True)
        assert p.returncode != 0
        assert b"too many terminals" in p.stdout, p.stdout  # sbx's stderr: the terminal
        assert b"should-not-run" not in p.stdout
        # commands without a terminal still run
        assert sbx.run("exec", "-t", t, "--", "echo fine").stdout == b"fine\n"
    finally:
        for h in held:
            h.kill()
        for h in held:
            h.wait()
    # the terminals were given back
    deadline = time.time() + 20
    while True:
        p = sbx.run("exec", "-t", t, "--tty", "--", "echo again", timeout=60, tty=True)
        if p.returncode == 0 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert b"again" in p.stdout, p.stderr


def test_sandbox_cannot_exhaust_the_host_pty_pool(sbx):
    """A process in the sandbox opens /dev/ptmx until it fails; while it holds them all, the host
    can still open a terminal (the sandbox's devpts is its own instance, and instances other than
    the host's stop short of kernel.pty.reserve)."""
    t = new_thread("pool")
    hog = ("import os, sys\n"
           "fds = []\n"
           "try:\n"
           "    while len(fds) < 8192:\n"
           "        fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))\n"
           "except OSError as e:\n"
           "    print('STOPPED', e.errno)\n"
           "print('HELD', len(fds), flush=True)\n"
           "sys.stdin.read()\n")
    p = subprocess.Popen(sbx.cmd("exec", "-t", t, "-i", "--",
                                 "ulimit -n 10000 2>/dev/null; python3 -c %s" % shlex.quote(hog)),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        lines = []
        while True:
            line = p.stdout.readline().decode()
            assert line, "the hog ended early: %r" % lines
            lines.append(line)
            if line.startswith("HELD"):
                break
        held = int(lines[-1].split()[1])
        pty_max = int(open("/proc/sys/kernel/pty/max").read())
        assert held < pty_max  # bounded: it stopped before the host's limit
        # the host still gets terminals while the sandbox holds what it could
        m, s = os.openpty()
        os.close(m)
        os.close(s)
    finally:
        p.stdin.close()
        p.wait(timeout=60)
