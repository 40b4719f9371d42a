"""What sandboxes a test leaves running (issue 35 item 13): the integration and security suites'
autouse fixture fails a test whose sandboxes outlive it.

A sandbox is its init (sbx-init, PID 1 of its pid namespace), which holds its lease file
(STATE/sandboxes/ID/lease) open for its whole life: the lease's path says which state directory
(and so which test) it belongs to, even after that folder was deleted. Only sandboxes under the
test's own tmp_path count: other suites (or other pytest sessions) on the host start and end
sandboxes at any time, and a module's shared server keeps its own."""
import os
import signal
import time

import pytest


def sandbox_inits(prefix):
    """{pid: lease path} of the sandbox inits whose lease is below prefix."""
    found = {}
    prefix = os.path.realpath(str(prefix)).rstrip("/") + "/"
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/status" % name) as f:
                nspid = next((l.split()[1:] for l in f if l.startswith("NSpid:")), [])
            if len(nspid) < 2 or nspid[-1] != "1":
                continue
            fds = "/proc/%s/fd" % name
            for fd in os.listdir(fds):
                target = os.readlink(os.path.join(fds, fd))
                if target.startswith(prefix) and target.split(" (deleted)")[0].endswith("/lease"):
                    found[int(name)] = target
                    break
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
    return found


def check(prefix, before, grace=10.0):
    """The sandboxes below prefix that are not in before and still run after grace seconds
    (a destroy that is under way ends its init soon); they are killed, and returned so the
    caller can fail the test."""
    deadline = time.monotonic() + grace
    while True:
        left = {p: t for p, t in sandbox_inits(prefix).items() if p not in before}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


@pytest.fixture(autouse=True)
def no_sandbox_outlives_the_test(tmp_path):
    """Fails the test if a sandbox it started (one whose state directory is below its tmp_path)
    still runs once its fixtures are torn down (each suite's conftest sets it up first, so it is
    torn down last); the leftovers are killed."""
    before = sandbox_inits(tmp_path)
    yield
    left = check(tmp_path, before)
    if left:
        pytest.fail("%d sandbox(es) outlived the test (killed now): %s" % (
            len(left), ", ".join("pid %d (%s)" % kv for kv in sorted(left.items()))))
