"""File operations of the contract through the CLI: read_file ranges, write/append, update
(binary), download (confined, capped), list_dir, glob, grep (contract §1.2-1.8, §5)."""
import json
import os

import pytest

from conftest import TEST_IMAGE

# integration/image runs this file with sandboxes from a busybox image: no python3 there
needs_python = pytest.mark.skipif(bool(TEST_IMAGE), reason="python3 in the sandbox (host image)")

WS = "/mnt/user-data/workspace"


def write(sbx, path, data, append=False, thread="t1"):
    args = ["write", "-t", thread, path] + (["--append"] if append else [])
    return sbx.run(*args, input=data)


def test_write_read_roundtrip_and_parents(sbx):
    assert write(sbx, WS + "/a/b/c.txt", "line1\nline2\r\nline3\n").returncode == 0
    assert sbx.ok("read", "-t", "t1", WS + "/a/b/c.txt") == "line1\nline2\r\nline3\n"
    # the file is really there for commands too
    assert sbx.sh("t1", "cat a/b/c.txt")["stdout"] == "line1\nline2\r\nline3\n"


def test_append_creates_and_accumulates(sbx):
    write(sbx, WS + "/log.txt", "one\n", append=True)
    write(sbx, WS + "/log.txt", "two\n", append=True)
    assert sbx.ok("read", "-t", "t1", WS + "/log.txt") == "one\ntwo\n"
    write(sbx, WS + "/log.txt", "reset\n")
    assert sbx.ok("read", "-t", "t1", WS + "/log.txt") == "reset\n"


@pytest.mark.parametrize("start,end,want", [
    (None, None, "1\n2\n3\n4\n5\n"),
    ("2", "4", "2\n3\n4"),
    ("-3", "2", "1\n2"),         # start below 1 clamps to 1
    ("0", "1", "1"),
    ("4", None, "4\n5"),
    (None, "2", "1\n2"),
    ("6", "9", ""),              # start past the end
    ("2", "0", ""),              # end at or below 0
    ("2", "-1", ""),
    ("4", "3", ""),              # end before start
])
def test_read_ranges(sbx, start, end, want):
    write(sbx, WS + "/n.txt", "1\n2\n3\n4\n5\n")
    args = ["read", "-t", "t1", WS + "/n.txt"]
    if start is not None:
        args += ["--start", start]
    if end is not None:
        args += ["--end", end]
    assert sbx.ok(*args) == want


def test_read_errors(sbx):
    sbx.sh("t1", "printf 'ok\\377\\376' > bin.dat; mkdir -p d")
    p = sbx.run("read", "-t", "t1", WS + "/bin.dat")
    assert p.returncode == 1
    assert b"cannot read '/mnt/user-data/workspace/bin.dat' as text" in p.stderr
    assert b"binary file" in p.stderr
    p = sbx.run("read", "-t", "t1", WS + "/missing.txt")
    assert p.returncode == 1 and b"File not found: /mnt/user-data/workspace/missing.txt" in p.stderr
    p = sbx.run("read", "-t", "t1", WS + "/d")
    assert p.returncode == 1 and b"Path is a directory, not a file" in p.stderr


@needs_python
def test_read_large_text_whole_ranged_and_capped(sbx):
    # 7-byte units: multi-byte characters straddle 8-byte words and 256 KiB chunks everywhere
    unit, cap = "a\u00e9\u20ac\n".encode(), 104857600
    n = cap // len(unit)
    want = unit * n + b"z" * (cap - len(unit) * n)
    gen = "import sys\nu = %r\nsys.stdout.buffer.write(u * %d + b'z' * %d)\n" % (
        unit, n, cap - len(unit) * n)
    assert write(sbx, WS + "/gen.py", gen).returncode == 0
    assert sbx.sh("t1", "python3 gen.py > big.txt")["exit_code"] == 0
    p = sbx.run("read", "-t", "t1", WS + "/big.txt", timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == cap and p.stdout == want  # exactly the cap is allowed
    p = sbx.run("read", "-t", "t1", WS + "/big.txt", "--start", str(n - 1), "--end", str(n))
    assert p.returncode == 0 and p.stdout == unit + unit[:-1], p.stdout
    sbx.sh("t1", "printf x >> big.txt")  # one byte past the cap
    p = sbx.run("read", "-t", "t1", WS + "/big.txt", timeout=120)
    assert p.returncode == 1
    assert b"File exceeds maximum read size of 104857600 bytes" in p.stderr, p.stderr
    # a non-UTF-8 byte after a long ASCII run is still found
    sbx.sh("t1", "head -c 1000003 /dev/zero | tr '\\0' a > late.txt; printf '\\377' >> late.txt")
    p = sbx.run("read", "-t", "t1", WS + "/late.txt")
    assert p.returncode == 1 and b"binary file" in p.stderr, p.stderr
    sbx.sh("t1", "rm -f big.txt late.txt gen.py")


@pytest.mark.parametrize("path,msg", [
    ("relative.txt", b"path must be absolute: 'relative.txt'"),
    ("/mnt/user-data/../etc/passwd", b"Access denied: path traversal detected in '/mnt/user-data/../etc/passwd'"),
    (WS + "/..", b"path traversal detected"),
])
def test_paths_must_be_absolute_and_traversal_free(sbx, path, msg):
    for verb in (["read"], ["write"], ["upload"], ["download"], ["ls"], ["glob"], ["grep"]):
        args = verb + ["-t", "t1", path] + (["*"] if verb[0] in ("glob", "grep") else [])
        p = sbx.run(*args, input=b"x")
        assert p.returncode == 1, (verb, p)
        assert msg in p.stderr, (verb, p.stderr)


def test_upload_and_download_binary(sbx):
    data = bytes(range(256)) * 1000
    assert sbx.run("upload", "-t", "t1", "/mnt/user-data/outputs/x/blob.bin", input=data).returncode == 0
    p = sbx.run("download", "-t", "t1", "/mnt/user-data/outputs/x/blob.bin")
    assert p.returncode == 0 and p.stdout == data


def test_download_to_file(sbx, tmp_path):
    sbx.run("upload", "-t", "t1", "/mnt/user-data/outputs/r.txt", input=b"report")
    out = tmp_path / "r.txt"
    sbx.run("download", "-t", "t1", "/mnt/user-data/outputs/r.txt", "-o", str(out), check=0)
    assert out.read_bytes() == b"report"
    # a failed download leaves no file
    bad = tmp_path / "bad.txt"
    p = sbx.run("download", "-t", "t1", "/mnt/user-data/outputs/none", "-o", str(bad))
    assert p.returncode == 1 and not bad.exists()


def test_download_confined_to_user_data(sbx):
    p = sbx.run("download", "-t", "t1", "/etc/hostname")
    assert p.returncode == 1
    assert b"Access denied: path must be under '/mnt/user-data': '/etc/hostname'" in p.stderr
    p = sbx.run("download", "-t", "t1", "/mnt/user-data2/x")
    assert p.returncode == 1 and b"must be under '/mnt/user-data'" in p.stderr


def test_download_size_cap(sbx):
    sbx.sh("t1", "truncate -s 104857601 /mnt/user-data/outputs/big; truncate -s 104857600 /mnt/user-data/outputs/edge")
    p = sbx.run("download", "-t", "t1", "/mnt/user-data/outputs/big")
    assert p.returncode == 1
    assert b"File exceeds maximum download size of 104857600 bytes" in p.stderr
    assert p.stdout == b""
    p = sbx.run("download", "-t", "t1", "/mnt/user-data/outputs/edge", timeout=120)
    assert p.returncode == 0 and len(p.stdout) == 104857600
    # the sandbox is still fine (a too-large download is not a terminal error)
    assert sbx.sh("t1", "echo ok")["stdout"] == "ok\n"


def test_list_dir(sbx):
    sbx.sh("t1", "mkdir -p a/b/c node_modules/x .git; touch a/f a/b/g a/b/c/h top.txt node_modules/x/y app.log")
    assert sbx.json("ls", "-t", "t1", WS, "--json") == {"entries": [
        WS + "/a/", WS + "/a/b/", WS + "/a/f", WS + "/top.txt"]}
    assert sbx.json("ls", "-t", "t1", WS, "--depth", "1", "--json")["entries"] == [
        WS + "/a/", WS + "/top.txt"]
    assert sbx.json("ls", "-t", "t1", WS, "--depth", "3", "--json")["entries"] == [
        WS + "/a/", WS + "/a/b/", WS + "/a/b/c/", WS + "/a/b/g", WS + "/a/f", WS + "/top.txt"]
    assert sbx.ok("ls", "-t", "t1", WS + "/a", "--depth", "1") == WS + "/a/b/\n" + WS + "/a/f\n"
    p = sbx.run("ls", "-t", "t1", WS + "/nope")
    assert p.returncode == 1 and b"not found" in p.stderr.lower()
    # ignored names below the root are hidden, but a root inside one is listed
    assert sbx.json("ls", "-t", "t1", WS + "/node_modules", "--json")["entries"] == [
        WS + "/node_modules/x/", WS + "/node_modules/x/y"]


def test_glob(sbx):
    sbx.sh("t1", "mkdir -p src/b node_modules/m; touch src/a.py src/b/c.py src/b/d.txt x.py node_modules/m/z.py")
    r = sbx.json("glob", "-t", "t1", WS, "**/*.py", "--json")
    assert r == {"matches": [WS + "/x.py", WS + "/src/a.py", WS + "/src/b/c.py"], "truncated": False}
    assert sbx.json("glob", "-t", "t1", WS, "*.py", "--json")["matches"] == [
        WS + "/x.py", WS + "/src/a.py", WS + "/src/b/c.py"]
    assert sbx.json("glob", "-t", "t1", WS, "src/*.py", "--json")["matches"] == [WS + "/src/a.py"]
    assert sbx.json("glob", "-t", "t1", WS, "src/**/*.py", "--json")["matches"] == [
        WS + "/src/a.py", WS + "/src/b/c.py"]
    r = sbx.json("glob", "-t", "t1", WS, "*", "--include-dirs", "--json")
    assert WS + "/src/" in r["matches"] or WS + "/src" in r["matches"]
    p = sbx.run("glob", "-t", "t1", WS + "/x.py", "*")
    assert p.returncode == 1


def test_glob_limit_plus_one(sbx):
    sbx.sh("t1", "mkdir -p many; cd many; for i in $(seq 1 10); do touch f$i.txt; done")
    r = sbx.json("glob", "-t", "t1", WS + "/many", "*.txt", "--max", "10", "--json")
    assert len(r["matches"]) == 10 and r["truncated"] is False  # exactly full is complete
    r = sbx.json("glob", "-t", "t1", WS + "/many", "*.txt", "--max", "9", "--json")
    assert len(r["matches"]) == 9 and r["truncated"] is True
    r = sbx.json("glob", "-t", "t1", WS + "/many", "*.txt", "--max", "0", "--json")
    assert r == {"matches": [], "truncated": True}


def test_glob_not_eaten_by_node_modules(sbx):
    # DeerFlow's false negative: 1,200 files under node_modules, max_results 200, src/app.py
    sbx.sh("t1", "mkdir -p node_modules/pkg src; cd node_modules/pkg; for i in $(seq 1 1200); do : > m$i.py; done; touch ../../src/app.py")
    r = sbx.json("glob", "-t", "t1", WS, "**/*.py", "--max", "200", "--json")
    assert r == {"matches": [WS + "/src/app.py"], "truncated": False}


def test_grep(sbx):
    sbx.sh("t1", "mkdir -p g/sub; printf 'Hello world\\nbye\\nHELLO again\\n' > g/a.txt; "
           "printf 'hello\\n' > g/sub/b.md; printf 'hello\\0binary' > g/bin.dat")
    r = sbx.json("grep", "-t", "t1", WS + "/g", "hello", "--json")
    assert r == {"matches": [
        {"path": WS + "/g/a.txt", "line_number": 1, "line": "Hello world"},
        {"path": WS + "/g/a.txt", "line_number": 3, "line": "HELLO again"},
        {"path": WS + "/g/sub/b.md", "line_number": 1, "line": "hello"}], "truncated": False}
    r = sbx.json("grep", "-t", "t1", WS + "/g", "hello", "--case-sensitive", "--json")
    assert [m["path"] for m in r["matches"]] == [WS + "/g/sub/b.md"]
    r = sbx.json("grep", "-t", "t1", WS + "/g", "hello", "--glob", "*.md", "--json")
    assert [m["line_number"] for m in r["matches"]] == [1]
    r = sbx.json("grep", "-t", "t1", WS + "/g/a.txt", "b.e", "--json")  # a single file, regex
    assert r["matches"] == [{"path": WS + "/g/a.txt", "line_number": 2, "line": "bye"}]
    r = sbx.json("grep", "-t", "t1", WS + "/g", "b.e", "--fixed", "--json")
    assert r["matches"] == []
    r = sbx.json("grep", "-t", "t1", WS + "/g", "hello", "--max", "2", "--json")
    assert len(r["matches"]) == 2 and r["truncated"] is True
    p = sbx.run("grep", "-t", "t1", WS + "/g", "(unclosed")
    assert p.returncode == 1 and b"(unclosed" in p.stderr
    assert sbx.ok("grep", "-t", "t1", WS + "/g/sub", "hello") == WS + "/g/sub/b.md:1: hello\n"


@needs_python
def test_grep_long_lines(sbx):
    sbx.sh("t1", "python3 -c \"open('long.txt','w').write('x'*250+'\\n'+'y'*2001+'\\n')\"")
    r = sbx.json("grep", "-t", "t1", WS + "/long.txt", "[xy]", "--json")
    assert r["matches"] == [{"path": WS + "/long.txt", "line_number": 1, "line": "x" * 197 + "..."}]
