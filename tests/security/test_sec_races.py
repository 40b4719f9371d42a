"""Races against every file operation (docs/security.md, "Races"): while the host reads,
writes, appends, uploads, downloads, lists, globs and greps, loops inside the sandbox swap a
directory for a symlink to / (renameat2 RENAME_EXCHANGE, millions of times a second), a file for
a symlink to /etc/passwd, a hard link in and out, and move subtrees up and down (a `..` walker
would leave the tree). The tests fail if any operation reaches the host, follows a link while
walking, modifies a host file, crashes sbx-init, or hangs."""
import json
import os
import subprocess
import time

import pytest

import sbxsec
from sbxsec import WS

RACE = WS + "/race"
DURATION = 4.0  # seconds of host operations during the swaps
# what the race directory legitimately holds (the swapped names exchange their objects)
ALLOWED_IN_D = {"f.txt", "new.txt", "app.txt", "up.bin"}
ALLOWED_FILES = {"f.txt", "fl", "keep.txt", "h.txt", "outside-sibling/m.txt", "a/b/c/deep.txt",
                 "c2/deep.txt"}


def _setup(sbx, thread):
    sbx.sh(thread, "mkdir -p {r}/d {r}/outside-sibling {r}/a/b/c && cd {r} && "
           "echo INSIDE > d/f.txt && echo INSIDE > f.txt && ln -s / l && "
           "ln -s /etc/passwd fl && echo INSIDE > keep.txt && "
           "echo OUTSIDE-MARKER > outside-sibling/m.txt && echo INSIDE > a/b/c/deep.txt && "
           "echo ok".format(r=RACE))


def _loops(sbx, thread, prober):
    prober.install(thread)
    secs = int(DURATION) + 3
    cmds = [
        "%s/probe swap %s %d" % (WS, RACE, secs),
        "%s/probe swapfile %s %d" % (WS, RACE, secs),
        # hard link in and out of the path the host writes
        "cd %s; end=$(($(date +%%s)+%d)); while [ $(date +%%s) -lt $end ]; do "
        "ln -f keep.txt h.txt 2>/dev/null; rm -f h.txt; done" % (RACE, secs),
        # move a subtree up and back down (a walker climbing with .. would end elsewhere)
        "cd %s; end=$(($(date +%%s)+%d)); while [ $(date +%%s) -lt $end ]; do "
        "mv a/b/c c2 2>/dev/null; mv c2 a/b/c 2>/dev/null; done" % (RACE, secs),
    ]
    procs = [sbxsec.spawn_cli(sbx, "exec", "-t", thread, "--timeout", str(secs + 30), "--", c,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
    time.sleep(0.5)  # let the loops start
    return procs


def _host_ops(sbx, thread):
    """One round of every operation through the racing paths: (verb, args, process)."""
    runs = []

    def run(*args, input=b""):
        p = sbx.run(*args, input=input, timeout=60)
        runs.append((args, p))
        return p

    run("read", "-t", thread, RACE + "/d/f.txt")
    run("read", "-t", thread, RACE + "/f.txt")
    run("download", "-t", thread, RACE + "/d/f.txt")
    run("download", "-t", thread, RACE + "/f.txt")
    run("write", "-t", thread, RACE + "/d/new.txt", input=b"NEW")
    run("write", "-t", thread, RACE + "/d/app.txt", "--append", input=b"APP")
    run("upload", "-t", thread, RACE + "/d/up.bin", input=b"UP")
    run("write", "-t", thread, RACE + "/h.txt", input=b"VIA-HARDLINK")
    run("write", "-t", thread, RACE + "/f.txt", "--append", input=b"")
    run("ls", "-t", thread, RACE, "--depth", "4", "--json")
    run("glob", "-t", thread, RACE, "**", "--json")
    run("glob", "-t", thread, RACE + "/a", "**/*.txt", "--json")
    run("grep", "-t", thread, RACE, "sbx-|root:|OUTSIDE|INSIDE", "--json")
    run("grep", "-t", thread, RACE + "/a", "OUTSIDE-MARKER", "--json")
    return runs


def test_races_against_every_file_operation(sbx, prober, host_secret):
    marker, secrets = host_secret
    thread = sbxsec.new_thread("race")
    _setup(sbx, thread)
    pid = sbxsec.sandbox_pid(sbx, thread)
    sandbox_id = sbxsec.sandbox_info(sbx, thread)["id"]
    before = {p: open(p).read() for p in secrets}
    host_passwd = open("/etc/passwd").read()
    procs = _loops(sbx, thread, prober)
    rounds, all_runs = 0, []
    try:
        end = time.monotonic() + DURATION
        while time.monotonic() < end:
            all_runs += _host_ops(sbx, thread)
            rounds += 1
    finally:
        outs = [p.communicate(timeout=60) for p in procs]
    swaps = [int(o[0].split()[-1]) for o in outs[:2] if o[0].startswith(b"swaps")]
    assert len(swaps) == 2 and min(swaps) > 1000, (swaps, outs)
    assert rounds >= 2
    print("race: %d rounds of %d operations, swaps %r" % (rounds, len(all_runs) // rounds, swaps))

    for args, p in all_runs:
        # a clean answer or a clean error, never a crash, a usage error or a broken channel
        assert p.returncode in (0, 1), (args, p.returncode, p.stderr[-300:])
        assert b"channel broken" not in p.stderr and b"not running" not in p.stderr, (args, p.stderr)
        assert marker.encode() not in p.stdout
        verb = args[0]
        if verb in ("read", "download") and p.returncode == 0:
            # the file itself, or the sandbox's generated /etc/passwd through the final symlink
            assert p.stdout.startswith(b"INSIDE") or p.stdout.startswith(b"root:x:0:0:root"), \
                (args, p.stdout[:100])
            assert p.stdout.decode(errors="replace") != host_passwd
        if verb in ("ls", "glob") and p.returncode == 0:
            # walks never follow a link below their root: nothing of the sandbox's / shows up
            # under d or l (whichever of the two names holds the real directory at the time)
            j = json.loads(p.stdout)
            for e in j.get("entries", []) + j.get("matches", []):
                rel = e[len(RACE):].strip("/").split("/")
                if len(rel) >= 2 and rel[0] in ("d", "l"):
                    assert rel[1] in ALLOWED_IN_D, e
        if verb == "grep" and p.returncode == 0:
            for m in json.loads(p.stdout)["matches"]:
                rel = m["path"][len(RACE) + 1:]
                parts = rel.split("/")
                assert rel in ALLOWED_FILES or (parts[0] in ("d", "l") and len(parts) == 2 and
                                                parts[1] in ALLOWED_IN_D), m
                assert not m["line"].startswith(("root:", "sbx-")), m
                if args[3].endswith("/a"):
                    assert "OUTSIDE" not in m["line"], m
    # nothing changed on the host, nothing was written there
    for p in secrets:
        assert open(p).read() == before[p]
    assert open("/etc/passwd").read() == host_passwd
    for name in ("new.txt", "app.txt", "up.bin", "h.txt"):
        for d in ("/", "/root", "/tmp", "/etc", sbx.home):
            assert not os.path.exists(os.path.join(d, name)), os.path.join(d, name)
    # the sandbox's own root is still read-only and intact; sbx-init never died
    assert sbxsec.sandbox_pid(sbx, thread) == pid
    assert sbxsec.sandbox_info(sbx, thread)["id"] == sandbox_id
    r = sbx.sh(thread, "ls /new.txt /app.txt /up.bin 2>&1; cat %s/keep.txt" % RACE)
    assert "No such file" in r["stdout"] and r["stdout"].strip().endswith("INSIDE")
