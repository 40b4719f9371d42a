"""The README's Python example runs as written (python3-httpx against sbxd's contract API)."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, SBX, SOURCE, slow

SBXD = os.path.join(BUILD, "sbxd")


def readme_python():
    with open(os.path.join(SOURCE, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, "the README has one Python example"
    return blocks[0]


def test_readme_python_example_runs(tmp_path):
    pytest.importorskip("httpx")
    home = tmp_path / "home"
    proc = subprocess.Popen([SBXD, "--listen", "127.0.0.1:0", "--home", str(home)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        address = None
        for line in proc.stderr:
            rec = json.loads(line)
            if rec.get("msg") == "listening":
                address = rec["address"]
                break
        assert address, "sbxd did not start"
        code = readme_python()
        assert "127.0.0.1:8080" in code
        script = tmp_path / "example.py"
        script.write_text(code.replace("127.0.0.1:8080", address))
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=slow(120))
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].startswith("hi from ") and lines[-1] == "hello", p.stdout
        # the same scope as the CLI's: the file is in demo's thread folder, the sandbox warm
        with open(home / "users/default/threads/demo/user-data/outputs/a.txt") as f:
            assert f.read() == "hello\n"
        ps = json.loads(subprocess.run([SBX, "--home", str(home), "ps", "--json"],
                                       capture_output=True, check=True).stdout)
        assert [(s["thread"], s["state"]) for s in ps["sandboxes"]] == [("demo", "warm")], ps
    finally:
        proc.terminate()
        proc.wait(30)
        subprocess.run([SBX, "--home", str(home), "down"], capture_output=True, timeout=120)
