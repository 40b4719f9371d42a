"""A foreground command lives as long as its caller: `sbx exec` killed, its output pipe closed,
a SIGTERM to `sbx exec -i/-T`; and the `sh -lc` wrapper does not change a command's status."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import slow


def procs(sbx, thread, name):
    """pids of the processes called name in the thread's sandbox"""
    out = sbx.sh(thread, "ps -eo pid=,comm=")["stdout"]
    return [line.split()[0] for line in out.splitlines() if line.split()[1:] == [name]]


def wait_for(cond, timeout, what):
    deadline = time.time() + slow(timeout)
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(what)


def gone(sbx, thread, name, timeout=15):
    wait_for(lambda: procs(sbx, thread, name) == [], timeout,
             "%s still runs in the sandbox: %s" % (name, procs(sbx, thread, name)))


def test_exec_piped_to_head_ends_the_command(sbx, tmp_path):
    """`sbx exec -- yes | head -1`: sbx dies of SIGPIPE while yes prints; yes must end too (it
    ran on at full speed, its output dropped, once sbx-init had found the client gone on a
    write rather than a read)."""
    sbx.ok("exec", "-t", "head", "--", "true")
    cmd = " ".join(sbx.cmd("exec", "-t", "head", "--", "yes")) + " | head -1"
    for _ in range(3):
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=slow(60))
        assert p.stdout == b"y\n", p.stderr
    gone(sbx, "head", "yes")
    # the same with SIGPIPE ignored (as a Python parent leaves it): sbx's write fails with
    # EPIPE, it says so and ends the command
    r, w = os.pipe()
    proc = subprocess.Popen(sbx.cmd("exec", "-t", "head", "--", "yes"), stdout=w,
                            stderr=subprocess.PIPE, restore_signals=False)
    os.close(w)
    assert os.read(r, 2) == b"y\n"
    os.close(r)
    err = proc.stderr.read()
    assert proc.wait(timeout=slow(30)) == 1, err
    assert b"output could not be delivered" in err, err
    gone(sbx, "head", "yes")


@pytest.mark.parametrize("reading", [True, False])
def test_exec_killed_while_the_command_prints(sbx, reading):
    """SIGKILL to `sbx exec` while its command writes without pause, whether sbx was reading
    (output to /dev/null) or stuck (a pipe nobody reads): the command ends with it."""
    t = "kill" + ("r" if reading else "s")
    sbx.ok("exec", "-t", t, "--", "true")
    proc = subprocess.Popen(sbx.cmd("exec", "-t", t, "--", "yes"),
                            stdout=subprocess.DEVNULL if reading else subprocess.PIPE)
    try:
        wait_for(lambda: procs(sbx, t, "yes"), 20, "yes did not start")
        time.sleep(0.5)
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout:
            proc.stdout.close()
    gone(sbx, t, "yes")
    # the control: a silent command ended so before, and still does
    proc = subprocess.Popen(sbx.cmd("exec", "-t", t, "--", "sleep 1000"))
    wait_for(lambda: procs(sbx, t, "sleep"), 20, "sleep did not start")
    proc.kill()
    proc.wait()
    gone(sbx, t, "sleep")


def test_background_processes_of_a_killed_exec_stay(sbx):
    """What the command put in the background (its own process group) is not the command: it
    stays, as documented, when the exec is killed."""
    proc = subprocess.Popen(sbx.cmd("exec", "-t", "bgk", "--",
                                    "setsid sleep 1000 & echo started; exec yes"),
                            stdout=subprocess.DEVNULL)
    wait_for(lambda: procs(sbx, "bgk", "yes"), 20, "yes did not start")
    proc.kill()
    proc.wait()
    gone(sbx, "bgk", "yes")
    assert procs(sbx, "bgk", "sleep"), "the background sleep was killed too"


def test_sigterm_ends_an_interactive_session(sbx):
    """SIGTERM to `sbx exec -i` whose command ignores it (as an interactive bash does): sbx
    passes it on, then ends the session: it exits 143 and the command is gone."""
    proc = subprocess.Popen(sbx.cmd("exec", "-t", "term", "-i", "--",
                                    "trap '' TERM INT; echo ready; exec sleep 1000"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        wait_for(lambda: procs(sbx, "term", "sleep"), 20, "sleep did not start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=slow(20)) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    gone(sbx, "term", "sleep")


tmux_needed = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@tmux_needed
def test_sigterm_ends_a_terminal_session(sbx, tmp_path):
    """`timeout 10 sbx exec -T -- bash` on a terminal: bash ignores SIGTERM, sbx must not."""
    from test_interactive import Tmux, sbx_cmd
    tmux = Tmux(tmp_path)
    try:
        sbx.ok("exec", "-t", "tterm", "--", "true")
        pidfile = tmp_path / "pid"
        tmux.start("echo $$ > %s; %s; echo SBX-EXITED:$?" % (
            pidfile, sbx_cmd(sbx, "exec", "-t", "tterm", "-T", "--", "bash")))
        tmux.type("echo in-bash-$((6*7))")
        tmux.wait("in-bash-42", timeout=slow(30))
        sh = int(pidfile.read_text())
        with open("/proc/%d/task/%d/children" % (sh, sh)) as f:
            os.kill(int(f.read().split()[0]), signal.SIGTERM)  # sbx, the shell's child
        tmux.wait("SBX-EXITED:143", timeout=slow(30))
    finally:
        tmux.kill()
    gone(sbx, "tterm", "bash")


@tmux_needed
def test_ctrl_c_at_a_repl_does_not_change_its_exit_status(sbx, tmp_path):
    """^C at python's prompt, then exit(0): the status is 0 (the `sh -lc` wrapper got the ^C
    too and made it 130); a simple command is exec'd by the wrapper."""
    from test_interactive import Tmux, sbx_cmd
    tmux = Tmux(tmp_path)
    try:
        sbx.ok("exec", "-t", "repl", "--", "true")
        tmux.start(sbx_cmd(sbx, "exec", "-t", "repl", "-T", "--", "python3 -q") +
                   "; echo SBX-EXITED:$?")
        tmux.wait(">>>")
        tmux.keys("C-c")
        tmux.wait("KeyboardInterrupt")
        tmux.type("exit(0)")
        tmux.wait("SBX-EXITED:0")
    finally:
        tmux.kill()
    # what the shell wraps: a simple command is the shell (exec), anything else is not
    assert sbx.sh("repl", "ps -o comm= -p $$")["stdout"].strip() == "ps"
    assert sbx.sh("repl", "ps -o comm= -p $$ | cat")["stdout"].strip() == "sh"
    # builtins stay the shell's (dash's echo, exit), and a missing command says so as before
    assert sbx.sh("repl", "echo 'a\\nb'")["stdout"] == "a\nb\n"
    assert sbx.sh("repl", "exit 3")["exit_code"] == 3
    r = sbx.sh("repl", "no-such-command x")
    assert r["exit_code"] == 127 and "exec" not in r["stderr"], r
    assert sbx.sh("repl", "python3 -c 'import sys; sys.exit(5)'")["exit_code"] == 5
