"""grep cannot run forever (docs/security.md, "Resources"): a backtracking regex on one line
used to spin a thread of sbx-init at 100% CPU for as long as it liked, the deadline being looked
at only between lines, and on after its client had given up. The positive control: while the
client waits, the pattern really does burn a CPU (so the check after it is not vacuous). Then
the client goes away, and the burning must stop at once; and the sandbox serves again."""
import os
import signal
import time

import sbxsec
from sbxsec import WS

EVIL = r"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x"
TICK = os.sysconf("SC_CLK_TCK")
WINDOW = 3.0  # seconds each CPU rate is measured over


def _children():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _cpu(pid, kids, reaped):
    """CPU seconds of pid (all its threads), with its reaped children if asked."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    t = int(v[11]) + int(v[12]) + ((int(v[13]) + int(v[14])) if reaped else 0)
    return t / TICK + sum(_cpu(k, kids, False) for k in kids.get(pid, []))


def sandbox_cpu(pid):
    """CPU seconds used so far by sbx-init (pid) and every process below it."""
    return _cpu(pid, _children(), True)


def test_grep_backtracking_stops_with_its_client(sbx):
    thread = sbxsec.new_thread("grep")
    line = "x" + "a" * 300
    r = sbx.sh(thread, "mkdir -p %s && printf '%%s\\n' '%s' > %s/evil.txt" % (WS, line, WS))
    assert r["exit_code"] == 0, r
    pid = sbxsec.sandbox_pid(sbx, thread)
    assert pid

    # (rates, not absolute times: the host's CPUs may be shared with other work)
    client = sbxsec.spawn_cli(sbx, "grep", "-t", thread, WS, EVIL, "--json")
    try:
        time.sleep(1.0)
        c0 = sandbox_cpu(pid)
        time.sleep(WINDOW)
        burning = (sandbox_cpu(pid) - c0) / WINDOW
        assert client.poll() is None, "the search ended on its own: no positive control"
        print("while the client waits: %.2f CPU" % burning)
        assert burning > 0.1, burning  # positive control: the pattern does burn a CPU
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    time.sleep(1.0)  # the search looks at its client every 20 ms
    c1 = sandbox_cpu(pid)
    time.sleep(WINDOW)
    after = (sandbox_cpu(pid) - c1) / WINDOW
    print("after the client went away: %.2f CPU" % after)
    assert after < burning / 4, "sbx-init still burns %.2f CPU for a client that has gone" % after

    # the sandbox still serves, searches included
    p = sbx.run("grep", "-t", thread, WS, "xa+$", "--json", check=0)
    assert b'"line_number": 1' in p.stdout or b'"line_number":1' in p.stdout, p.stdout
