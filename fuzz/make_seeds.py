#!/usr/bin/env python3
"""Writes the seed corpora of the protocol, agent, launch spec, text and path targets
(fuzz/corpus/{proto,tlv,agent,launch_spec,text,paths}/). The seeds are checked in; run this
only to regenerate them after a protocol change. Regression inputs (regress-*) are kept."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# src/common/proto.h
MSG = dict(HELLO=1, EXEC=2, SIGNAL=3, READ_TEXT=4, READ=5, WRITE=6, LIST=7, GLOB=8, GREP=9,
           STAT=10, MKDIR=11, REMOVE=12, RENAME=13, CHMOD=14, CONNECT=15, PING=16, CMD_STATUS=17,
           CMD_LOGS=18, READDIR=19, FIND=20, REPLACE=21, METRICS=22, OK=100, ERR=101, DATA=102,
           DATA_END=103, STARTED=104, STDOUT=105, STDERR=106, EXIT=107, ITEMS=108)
T = dict(VERSION=1, PATH=2, CMD=3, ARG=4, ENV=5, CWD=6, TIMEOUT_MS=7, OUT_CAP=8, ERR_CAP=9,
         FLAGS=10, ID=11, SIGNO=12, START=13, END=14, OFFSET=15, LIMIT=16, MAX=17, MODE=18,
         DEPTH=19, PATTERN=20, GLOB=21, KIND=22, STATUS=23, MSG=24, TEXT=25, CODE=26, TIMED_OUT=27,
         OUT_TOTAL=28, ERR_TOTAL=29, TRUNCATED=30, ITEM=31, LINE_NO=32, SIZE=33, PID=34, DEST=35,
         PORT=36, TYPE=37, MTIME=38, CTIME=39, UID=40, GID=41, RUNNING=42, STARTED_MS=43,
         FINISHED_MS=44, CURSOR=45, OLD=46, NEW=47, COUNT=48, SIGNALED=49, OWNER=50, GROUP=51)
F = dict(KILL_ON_DISCONNECT=1, BACKGROUND=2, MERGE=4, ARGV=8, APPEND=1 << 8, PARENTS=1 << 9,
         ATOMIC=1 << 10, LITERAL=1 << 12, CASE=1 << 13, GLOB_DIRS=1 << 14, RM_RECURSIVE=1 << 16,
         RM_DIR=1 << 17)


def tlv(tag, value):
    if isinstance(value, int):
        value = struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF)
    elif isinstance(value, str):
        value = value.encode()
    return struct.pack("<HI", tag, len(value)) + value


def fields(*pairs):
    return b"".join(tlv(T[k], v) for k, v in pairs)


def frame(kind, payload=b"", req=1, flags=0):
    return struct.pack("<IHHI", len(payload), MSG[kind], flags, req) + payload


def write(path, data, subdir):
    d = os.path.join(HERE, "corpus", subdir)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, path), "wb") as f:
        f.write(data)


def agent_seeds():
    W = "/work"
    s = {}
    s["write_read"] = (
        frame("WRITE", fields(("PATH", W + "/a.txt"), ("FLAGS", F["PARENTS"] | F["ATOMIC"]))) +
        frame("DATA", b"hello\nworld\r\nthird line\n") + frame("DATA_END") +
        frame("READ_TEXT", fields(("PATH", W + "/a.txt"), ("START", 2), ("END", 3))) +
        frame("READ", fields(("PATH", W + "/a.txt"), ("OFFSET", 3), ("LIMIT", 4), ("MAX", 100))) +
        frame("STAT", fields(("PATH", W + "/a.txt"))))
    s["append_mode"] = (
        frame("WRITE", fields(("PATH", "/x/y/z.bin"), ("FLAGS", F["PARENTS"] | F["APPEND"]),
                              ("MODE", 0o600))) + frame("DATA", b"\x00\x01\xff") +
        frame("DATA_END") +
        frame("WRITE", fields(("PATH", "/x/y/z.bin"), ("FLAGS", F["APPEND"]))) +
        frame("DATA", b"more") + frame("DATA_END") + frame("READ", fields(("PATH", "/x/y/z.bin"))))
    s["search"] = (
        frame("MKDIR", fields(("PATH", W + "/src/lib"), ("MODE", 0o755))) +
        frame("WRITE", fields(("PATH", W + "/src/lib/m.py"), ("FLAGS", F["PARENTS"]))) +
        frame("DATA", b"def main():\n    return 42\n") + frame("DATA_END") +
        frame("LIST", fields(("PATH", W), ("DEPTH", 3), ("MAX", 10))) +
        frame("GLOB", fields(("PATH", W), ("PATTERN", "**/*.py"), ("MAX", 5),
                             ("FLAGS", F["GLOB_DIRS"]))) +
        frame("GREP", fields(("PATH", W), ("PATTERN", "ret(urn)? [0-9]+"), ("GLOB", "**/*.py"),
                             ("MAX", 3), ("FLAGS", F["CASE"]))) +
        frame("GREP", fields(("PATH", W + "/src/lib/m.py"), ("PATTERN", "MAIN"),
                             ("FLAGS", F["LITERAL"]))) +
        frame("READDIR", fields(("PATH", W), ("DEPTH", 4))) +
        frame("FIND", fields(("PATH", W), ("PATTERN", "*.{py,txt,{c,h}}"))))
    s["rename_remove"] = (
        frame("MKDIR", fields(("PATH", "/d1/d2"))) +
        frame("WRITE", fields(("PATH", "/d1/d2/f"), ("FLAGS", F["PARENTS"]))) +
        frame("DATA", b"x") + frame("DATA_END") +
        frame("RENAME", fields(("PATH", "/d1/d2/f"), ("DEST", "/d3/g"))) +
        frame("CHMOD", fields(("PATH", "/d3/g"), ("MODE", 0o640), ("OWNER", "root"),
                              ("GROUP", "0"))) +
        frame("REPLACE", fields(("PATH", "/d3/g"), ("OLD", "x"), ("NEW", "yy"))) +
        frame("REMOVE", fields(("PATH", "/d1"), ("FLAGS", F["RM_RECURSIVE"]))) +
        frame("REMOVE", fields(("PATH", "/d3/g"))))
    s["exec_decode"] = (
        frame("EXEC", fields(("CMD", "echo hi"), ("ENV", "A=1"), ("ENV", "PATH=/x"),
                             ("CWD", "/"), ("TIMEOUT_MS", 1000), ("OUT_CAP", 10),
                             ("FLAGS", F["MERGE"]))) +
        frame("EXEC", fields(("ARG", "ls"), ("ARG", "-l"), ("FLAGS", F["ARGV"]), ("ID", "c1"))) +
        frame("SIGNAL", fields(("ID", "c1"), ("SIGNO", 15))) +
        frame("CMD_STATUS", fields(("ID", "c1"))) +
        frame("CMD_LOGS", fields(("ID", "c1"), ("CURSOR", 0))) + frame("PING"))
    s["errors"] = (
        frame("READ_TEXT", fields(("PATH", "/work/../etc/passwd"))) +
        frame("READ_TEXT", fields(("PATH", "relative"))) +
        frame("STAT", fields(("PATH", "/proc/self/fd/0"))) +
        frame("LIST", fields(("PATH", "/nonexistent"))) +
        frame("GREP", fields(("PATH", "/"), ("PATTERN", "(unclosed"))) +
        frame("WRITE", fields(("PATH", "/"))) + frame("DATA_END") +
        frame("METRICS") + frame("HELLO"))
    # regression: brace expansion used to recurse once per group on a connection thread's
    # 256 KiB stack (a find pattern of a few thousand groups crashed sbx-init)
    s["regress-find-brace-depth"] = (
        frame("MKDIR", fields(("PATH", "/b"))) +
        frame("FIND", fields(("PATH", "/"), ("PATTERN", "{a,b}" * 6000))))
    # regression: a tree deeper than the descriptor limit removed with bounded descriptors
    deep = "/" + "/".join(["d"] * 600)
    s["regress-remove-deep"] = (
        frame("MKDIR", fields(("PATH", deep))) +
        frame("REMOVE", fields(("PATH", "/d"), ("FLAGS", F["RM_RECURSIVE"]))) +
        frame("STAT", fields(("PATH", "/d"))))
    for name, data in s.items():
        write(name, data, "agent")


def proto_seeds():
    ok = frame("OK", fields(("TRUNCATED", 0)))
    items = frame("ITEMS", fields(("ITEM", "/a"), ("ITEM", "/b/")))
    err = frame("ERR", fields(("KIND", 2), ("STATUS", 2), ("MSG", "File not found: /x")))
    seeds = {
        "ok": b"\x00" + ok,
        "stream": b"\x00" + frame("STARTED", fields(("ID", "c"), ("PID", 7))) +
                  frame("STDOUT", b"out") + frame("STDERR", b"err") +
                  frame("EXIT", fields(("CODE", 0), ("TIMED_OUT", 0))),
        "items_err": b"\x00" + items + err,
        "with_fd": b"\x03" + ok + items,
        "with_3fds": b"\x07" + ok,
        "small_bound": b"\x08" + frame("DATA", b"x" * 5000),
        "truncated": b"\x00" + ok[:-3],
        "huge_len": b"\x00" + struct.pack("<IHHI", 0xFFFFFFF0, 102, 0, 1),
    }
    for k, v in seeds.items():
        write(k, v, "proto")


def tlv_seeds():
    seeds = {
        "err": fields(("KIND", 2), ("STATUS", 2), ("MSG", "File not found: /x")),
        "err_bad_kind": fields(("KIND", 999), ("STATUS", 1 << 40), ("MSG", "m")),
        "grep_item": fields(("ITEM", fields(("PATH", "/w/a.py"), ("LINE_NO", 3),
                                            ("TEXT", "x = 1")))),
        "info_item": fields(("ITEM", fields(("PATH", "/w/a"), ("TYPE", "f"), ("SIZE", 10),
                                            ("MODE", 0o644), ("MTIME", 1), ("CTIME", 2),
                                            ("UID", 0), ("GID", 0)))),
        "nul_in_string": fields(("PATH", "/a\x00b"), ("ITEM", "x\x00")),
        "short_u64": tlv(T["CODE"], b"\x01\x02"),
        "truncated": fields(("PATH", "/abc"))[:-1],
        "empty": b"",
    }
    for k, v in seeds.items():
        write(k, v, "tlv")


def launch_spec_seeds():
    L = dict(ID=1, STATE_DIR=2, USER_DATA=3, IMAGE=4, MEMORY=5, CPU=6, PIDS=7, NET_HOST=8,
             TMP=9, HOME=10, IDLE=11, MOUNT_HOST=12, MOUNT_CONTAINER=13, MOUNT_RO=14)

    def spec(*extra):
        base = [tlv(L["ID"], "0123456789abcdef"), tlv(L["STATE_DIR"], "/var/lib/sbx/sandboxes/x"),
                tlv(L["USER_DATA"], "/var/lib/sbx/users/u/threads/t/user-data"),
                tlv(L["IMAGE"], "host"), tlv(L["MEMORY"], 1 << 30), tlv(L["CPU"], 1000),
                tlv(L["PIDS"], 1024), tlv(L["NET_HOST"], 0), tlv(L["TMP"], 64 << 20),
                tlv(L["HOME"], 64 << 20), tlv(L["IDLE"], 600)]
        return b"".join(base) + b"".join(extra)

    seeds = {
        "minimal": spec(),
        "mounts": spec(tlv(L["MOUNT_HOST"], "/data"), tlv(L["MOUNT_CONTAINER"], "/mnt/data"),
                       tlv(L["MOUNT_RO"], 1), tlv(L["MOUNT_HOST"], "/srv"),
                       tlv(L["MOUNT_CONTAINER"], "/srv")),
        "relative_mount": spec(tlv(L["MOUNT_HOST"], "/data"), tlv(L["MOUNT_CONTAINER"], "rel")),
        "mount_without_container": spec(tlv(L["MOUNT_HOST"], "/data")),
        "container_before_host": tlv(L["MOUNT_CONTAINER"], "/x") + spec(),
        "missing_id": spec()[len(tlv(L["ID"], "0123456789abcdef")):],
        "nul_in_id": tlv(L["ID"], "ab\x00cd") + spec(),
    }
    for k, v in seeds.items():
        write(k, v, "launch_spec")


def text_seeds():
    def seed(sel, a, b, text):
        return bytes([sel]) + struct.pack("<qq", a, b) + text

    seeds = {
        "plain": seed(0, 2, 3, b"one\ntwo\r\nthree\nfour"),
        "no_bounds": seed(5, 0, 0, b"a\r\nb\r\n"),
        "start_only": seed(4, 3, 0, b"1\n2\n3\n4\n"),
        "end_only": seed(1, 0, 2, b"1\n2\n3\n"),
        "negative": seed(2 | 8, -5, -1, b"x\ny\n"),
        "extremes": seed(2 | 8, -(1 << 63), (1 << 63) - 1, b"x\ny"),
        "invalid_utf8": seed(0, 1, 9, b"\xc0\xaf \xe0\x80\x80 \xed\xa0\x80 \xf4\x90\x80\x80 "
                                      b"\xf0\x9f\x98 ok \xff\xfe \xe2\x82"),
        "valid_utf8": seed(0, 1, 1, "é ✓ 😀 \u0800 \U0010ffff".encode()),
        "env_key": seed(0, 0, 0, b"_A9=value"),
        "env_bad": seed(0, 0, 0, b"9A=value"),
        "render_timeout": seed(0, 3, (1 << 16) | (7 << 8) | 5, b"outerr"),
        "render_empty": seed(0, 0, 0, b""),
        "crlf_only": seed(0, 1, 4, b"\r\n\r\n\r"),
    }
    for k, v in seeds.items():
        write(k, v, "text")


def paths_seeds():
    seeds = {
        "ok": b"/mnt/user-data/workspace/a.txt\x00thread-1",
        "dotdot": b"/mnt/user-data/../etc/passwd\x00t",
        "backslash_dotdot": b"/mnt/user-data\\..\\etc\x00t",
        "dots": b"/a/.../b/./c/..x/x..\x00x_y-z",
        "relative": b"mnt/user-data/x\x00",
        "prefix_lookalike": b"/mnt/user-database\x00default",
        "double_slash": b"//mnt//user-data//\x000123456789abcdef",
        "long": b"/" + b"a" * 4100 + b"\x00" + b"t" * 65,
        "edge_4096": b"/" + b"b" * 4095 + b"\x00" + b"u" * 128,
        "utf8": "/mnt/user-data/é/✓\x00ü".encode(),
        "empty": b"",
    }
    for k, v in seeds.items():
        write(k, v, "paths")


if __name__ == "__main__":
    agent_seeds()
    proto_seeds()
    tlv_seeds()
    launch_spec_seeds()
    text_seeds()
    paths_seeds()
