"""The CLI's state directory and what a user sees of a sandbox's life (issue 35): a fixed default
home for root, read-only verbs that create nothing, evictions that are reported, and the
docker-like verbs (inspect, kill, pause/unpause, stats, rm --data)."""
import json
import os
import subprocess

import pytest

from conftest import SBX, alive, slow, thread_dir


def run_plain(args, cwd, env=None, timeout=60):
    """sbx without --home (and without $SBX_HOME): the default state directory."""
    e = {k: v for k, v in os.environ.items() if k != "SBX_HOME"}
    e.update(env or {})
    return subprocess.run([SBX] + args, cwd=cwd, env=e, capture_output=True, timeout=slow(timeout))


READ_ONLY = [["ps"], ["ps", "--json"], ["images"], ["image", "ls"], ["gc"], ["down"],
             ["config", "show"], ["config", "check"], ["doctor"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's default state directory")
def test_root_default_home_is_fixed_and_read_only_verbs_create_nothing(tmp_path):
    """As root the state is /var/lib/sbx (made 0700 at first use) wherever the CLI is started;
    ps, images, gc, down, config and doctor leave no folder behind. /var/lib is a fresh tmpfs in
    a mount namespace of the test's own, so the host's /var/lib/sbx is not touched."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    script = r"""
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /var/lib
for v in %(ro)s; do
  (cd %(a)s && eval "$SBX $v" >/dev/null 2>&1) || true
done
[ ! -e /var/lib/sbx ] && echo NO-HOME-AFTER-READS
[ -z "$(ls -A %(a)s)" ] && echo NO-DOT-SBX
cd %(a)s && $SBX exec -t demo -- 'echo hi > /tmp/mark' >/dev/null
stat -c 'MODE %%a' /var/lib/sbx
cd %(b)s && $SBX ps --json
cd %(b)s && $SBX exec -t demo -- 'cat /tmp/mark'
$SBX down
[ -z "$(ls -A %(a)s)" ] && [ -z "$(ls -A %(b)s)" ] && echo NO-DOT-SBX-AFTER
""" % {"ro": " ".join("'%s'" % " ".join(v) for v in READ_ONLY), "a": a, "b": b}
    e = {k: v for k, v in os.environ.items() if k != "SBX_HOME"}
    e["SBX"] = SBX
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], env=e, capture_output=True,
                       text=True, timeout=slow(120))
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = p.stdout
    assert "NO-HOME-AFTER-READS" in out and "NO-DOT-SBX" in out, out
    assert "MODE 700" in out, out
    ps = json.loads(next(l for l in out.splitlines() if l.startswith("{")))
    assert [s["thread"] for s in ps["sandboxes"]] == ["demo"], ps
    assert "hi" in out.splitlines(), out  # the same sandbox from the other folder
    assert "NO-DOT-SBX-AFTER" in out, out


def test_read_only_verbs_create_no_home(tmp_path):
    """With --home naming a folder that does not exist, the read-only verbs answer (an empty
    pool, no images) and leave it uncreated."""
    home = tmp_path / "nothing"
    for v in READ_ONLY:
        p = subprocess.run([SBX, "--home", str(home)] + v, capture_output=True, timeout=slow(60))
        assert p.returncode in (0, 1) if v == ["doctor"] else p.returncode == 0, (v, p.stderr)
        assert not home.exists(), v
    p = subprocess.run([SBX, "--home", str(home), "ps", "--json"], capture_output=True)
    assert json.loads(p.stdout)["sandboxes"] == []


def test_help_names_the_default_home():
    p = subprocess.run([SBX, "--help"], capture_output=True, text=True)
    assert "/var/lib/sbx as root" in p.stdout
