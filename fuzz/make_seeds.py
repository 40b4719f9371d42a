#!/usr/bin/env python3
"""Writes the seed corpora of the protocol, agent, launch spec, text, path and sbxd targets
(fuzz/corpus/{proto,tlv,agent,launch_spec,text,paths,sbxd_http,sbxd_request,dbus_reply}/). The seeds are
checked in; run this only to regenerate them after a protocol change (or a change of sbxd's
routes: ROUTES below follows the route table of fuzz/fuzz_sbxd_request.c). Regression inputs
(regress-*) are kept."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# src/common/proto.h
MSG = dict(HELLO=1, EXEC=2, SIGNAL=3, READ_TEXT=4, READ=5, WRITE=6, LIST=7, GLOB=8, GREP=9,
           STAT=10, MKDIR=11, REMOVE=12, RENAME=13, CHMOD=14, CONNECT=15, PING=16, CMD_STATUS=17,
           CMD_LOGS=18, READDIR=19, FIND=20, REPLACE=21, METRICS=22, STDIN=24, STDIN_EOF=25,
           RESIZE=26, OK=100, ERR=101, DATA=102,
           DATA_END=103, STARTED=104, STDOUT=105, STDERR=106, EXIT=107, ITEMS=108)
T = dict(VERSION=1, PATH=2, CMD=3, ARG=4, ENV=5, CWD=6, TIMEOUT_MS=7, OUT_CAP=8, ERR_CAP=9,
         FLAGS=10, ID=11, SIGNO=12, START=13, END=14, OFFSET=15, LIMIT=16, MAX=17, MODE=18,
         DEPTH=19, PATTERN=20, GLOB=21, KIND=22, STATUS=23, MSG=24, TEXT=25, CODE=26, TIMED_OUT=27,
         OUT_TOTAL=28, ERR_TOTAL=29, TRUNCATED=30, ITEM=31, LINE_NO=32, SIZE=33, PID=34, DEST=35,
         PORT=36, TYPE=37, MTIME=38, CTIME=39, UID=40, GID=41, RUNNING=42, STARTED_MS=43,
         FINISHED_MS=44, CURSOR=45, OLD=46, NEW=47, COUNT=48, SIGNALED=49, OWNER=50, GROUP=51,
         ROWS=57, COLS=58)
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
             TMP=9, HOME=10, IDLE=11, MOUNT_HOST=12, MOUNT_CONTAINER=13, MOUNT_RO=14,
             CG_MANAGER=15, CG_REQUIRED=16, CG_SLICE=17)

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
        "cgroup_systemd": spec(tlv(L["CG_MANAGER"], 2), tlv(L["CG_REQUIRED"], 0),
                               tlv(L["CG_SLICE"], "sbx-agents.slice")),
        "cgroup_manager_unknown": spec(tlv(L["CG_MANAGER"], 9)),
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


def sbxd_http_seeds():
    """fuzz_sbxd_http feeds every input to every parser of src/daemon/parse.c: one seed per
    shape each parser sees."""
    seeds = {
        # response heads of an app behind the port proxy, with and without bodies
        "head_200_length": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                           b"Content-Length: 5\r\n\r\nhello",
        "head_chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5\r\nhello\r\n0\r\n\r\n",
        "head_204": b"HTTP/1.1 204 No Content\r\nDate: Sun, 16 Nov 2025 14:30:45 GMT\r\n\r\n",
        "head_101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        "head_folded": b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\n\tc\r\nX-Empty:\r\n"
                       b"X-Space :v\r\nContent-Length:  3 \r\n\r\nabc",
        "head_lf_only": b"HTTP/1.0 404 Not Found\nContent-Length: 0\n\n",
        "head_no_reason": b"HTTP/1.1 200\r\n\r\n",
        "head_two_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "head_length_and_chunked": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                                   b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "head_huge_length": b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "head_bad_status": b"HTTP/1.1 20x OK\r\n\r\n",
        "head_status_999": b"HTTP/1.1 999 Whatever\r\n\r\n",
        "head_incomplete": b"HTTP/1.1 200 OK\r\nContent-Le",
        "head_nul": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n",
        # chunked bodies
        "chunked_ext_trailers": b"4;ext=v\r\nWiki\r\n5;a=\"q\"\r\npedia\r\n0\r\n"
                                b"Trailer-A: x\r\nTrailer-B: y\r\n\r\n",
        "chunked_upper_hex": b"A\r\n0123456789\r\n0\r\n\r\n",
        "chunked_bad_size": b"zz\r\nabc\r\n0\r\n\r\n",
        "chunked_negative": b"-1\r\nx\r\n0\r\n\r\n",
        "chunked_overflow": b"fffffffffffffffffff\r\nx\r\n",
        "chunked_short": b"5\r\nabc\r\n0\r\n\r\n",
        "chunked_unfinished": b"3\r\nabc\r\n0\r\n",
        "chunked_space": b"5 \r\nhello\r\n0\r\n\r\n",
        "chunked_0x": b"0x5\r\nhello\r\n0\r\n\r\n",
        "chunked_lf_only": b"5\nhello\n0\n\n",
        # Range headers
        "range_first_100": b"bytes=0-99",
        "range_suffix": b"bytes=-5",
        "range_open": b"bytes=10-",
        "range_multi": b"bytes=0-0,5-9,-1",
        "range_garbage": b"bytes=abc",
        "range_reversed": b"bytes=5-2",
        "range_spaces": b"bytes= 1 - 2",
        "range_unit": b"items=0-1",
        "range_zero_suffix": b"bytes=-0",
        "range_huge": b"bytes=18446744073709551615-18446744073709551616",
        # RFC 3339 timestamps
        "time_z": b"2025-11-16T14:30:45Z",
        "time_ms": b"2025-11-16T14:30:45.123Z",
        "time_offset_ns": b"2025-11-16T14:30:45.123456789+05:30",
        "time_space_negative": b"2025-11-16 14:30:45-08:00",
        "time_no_zone": b"2025-11-16T14:30:45",
        "time_epoch": b"1970-01-01T00:00:00Z",
        "time_max": b"9999-12-31T23:59:59.999Z",
        "time_feb30": b"2025-02-30T00:00:00Z",
        "time_24h": b"2025-11-16T24:00:00Z",
        "time_bad_offset": b"2025-11-16T14:30:45+25:00",
        "time_year0": b"0000-01-01T00:00:00Z",
        "time_lower": b"2025-11-16t14:30:45z",
        "time_leap_second": b"2016-12-31T23:59:60Z",
        # query strings
        "qs_pairs": b"a=1&b=2",
        "qs_escapes_plus": b"k=v%20x+y&%E2%9C%93=%e2%9c%93",
        "qs_bad_escape": b"k=%zz",
        "qs_no_equals": b"k",
        "qs_empty_key": b"=v",
        "qs_empty_fields": b"&&a=&",
        "qs_repeated": b"a=1&a=2&a=",
        "qs_metadata": b"team%3Dml%26env%3Dprod",
        "qs_nul": b"k=%00",
        "qs_two_equals": b"a=b=c",
        # quantities
        "cpu_milli": b"500m",
        "cpu_int": b"2",
        "cpu_fraction": b"0.5",
        "cpu_exp": b"1e3",
        "cpu_inf": b"inf",
        "cpu_nan": b"nan",
        "mem_mi": b"512Mi",
        "mem_gi": b"1Gi",
        "mem_g": b"1G",
        "mem_gib": b"2gib",
        "mem_k": b"10k",
        "mem_overflow": b"18446744073709551616Ti",
        "quantity_zero": b"0",
        "quantity_negative": b"-1",
        "quantity_spaces": b" 1 ",
        # labels
        "label_prefixed": b"app.kubernetes.io/name",
        "label_chars": b"example.com/a_b-c.d",
        "label_two_slashes": b"a/b/c",
        "label_dash": b"-bad",
        "label_63": b"x" * 63,
        "label_64": b"x" * 64,
        "label_reserved": b"opensandbox.io/id",
        "label_upper": b"A_b.C-9",
        # sandbox paths
        "path_slashes": b"//a//b/",
        "path_dots": b"/a/./b/../c",
        "path_climb": b"../../etc/passwd",
        "path_tilde": b"~",
        "path_tilde_sub": b"~/x/../y",
        "path_home_var": b"$HOME/x",
        "path_home_braces": b"${HOME}/y/.",
        "path_relative": b"relative/x",
        "path_root_dotdot": b"/..",
        "path_root_dot": b"/.",
        "path_trailing_dotdot": b"/a/b/..",
        "path_backslash": b"a\\..\\b",
        "path_user_data": b"/mnt/user-data/workspace/../../../",
        # output lines (and modes, shell quoting)
        "lines_mixed": b"one\ntwo\r\nthree\rfour\r\r\n\n",
        "lines_long_utf8": b"x" * 61 + "é✓😀".encode() * 4 + b"\n" + b"y" * 200,
        "lines_cr_split": b"a\r\nb\r",
        "lines_blank": b"\n\n\n",
        "lines_binary": b"a\x00b\nc\xff\xfe\r\n",
        "mode_755": b"755",
        "mode_bad_digit": b"8",
        "mode_max": b"7777",
        "mode_over": b"17777",
        "quote": b"it's a 'test'",
    }
    for k, v in seeds.items():
        write(k, v, "sbxd_http")


# fuzz/fuzz_sbxd_request.c's route table, in its order (byte 0 of a structured input picks one)
ROUTES = ["health", "create", "list", "get", "delete", "metadata", "pause", "resume", "renew",
          "endpoint", "events", "snapshots", "acquire", "release", "contract", "ping", "command",
          "interrupt", "status", "logs", "session", "session_run", "session_delete", "metrics",
          "files_info", "files_delete", "files_mv", "files_perm", "files_search",
          "files_replace", "upload", "download", "dir_list", "mkdir", "rmdir", "execd_proxy",
          "port", "code", "prov_caps", "prov_create", "prov_list", "prov_get", "prov_delete",
          "aio_context", "aio_shell", "aio_session_delete", "aio_bash", "aio_file", "aio_download"]
# byte 1: flags
UNKNOWN_ID, NO_TOKEN, CHUNKED, V1_TOGGLE, PROXY_FORM, EXPECT, HEAD = 1, 2, 4, 8, 16, 32, 64
RAW = 0xF0


def sbxd_request_seeds():
    def req(route, tail=b"", flags=0):
        if isinstance(tail, str):
            tail = tail.encode()
        return bytes([ROUTES.index(route), flags]) + tail

    def raw(data):
        return bytes([RAW]) + data

    def mp(*parts, end=True):
        out = b""
        for headers, body in parts:
            out += b"--sbxfuzzboundary\r\n" + headers + b"\r\n\r\n" + body + b"\r\n"
        return out + (b"--sbxfuzzboundary--\r\n" if end else b"")

    W = "/mnt/user-data/workspace"
    meta = (b'Content-Disposition: form-data; name="metadata"; filename="metadata"\r\n'
            b"Content-Type: application/json")
    filep = (b'Content-Disposition: form-data; name="file"; filename="b.txt"\r\n'
             b"Content-Type: application/octet-stream")
    seeds = {
        "health": req("health"),
        # DeerFlow's provisioner API and the AIO API (DeerFlow's remote_backend / AioSandbox bodies)
        "prov_caps": req("prov_caps"),
        "prov_caps_nokey": req("prov_caps", flags=NO_TOKEN),
        "prov_create": req("prov_create", '{"sandbox_id":"fz1","thread_id":"t1","user_id":"u1",'
                                          '"include_legacy_skills":false,'
                                          '"provision_lark_cli_runtime":false,'
                                          '"provision_lark_cli_broker":false}'),
        "prov_create_mounts": req("prov_create", '{"sandbox_id":"fz2","extra_mounts":[{"host_path":'
                                                 '"/x/acp","container_path":"/mnt/acp-workspace",'
                                                 '"read_only":true}]}'),
        "prov_create_bad": req("prov_create", '{"sandbox_id":"a/b","thread_id":1}'),
        "prov_list": req("prov_list"),
        "prov_get": req("prov_get", "fz1"),
        "prov_delete": req("prov_delete", "fz1"),
        "aio_context": req("aio_context"),
        "aio_context_badtoken": req("aio_context", flags=NO_TOKEN),
        "aio_shell_exec": req("aio_shell", 'exec\n{"command":"echo hi; cd /tmp; export A=1",'
                                           '"no_change_timeout":2,"hard_timeout":5}'),
        "aio_shell_session": req("aio_shell", 'sessions/create\n{"id":"s1","exec_dir":"/tmp"}'),
        "aio_shell_view": req("aio_shell", 'view\n{"id":"s1"}'),
        "aio_shell_wait": req("aio_shell", 'wait\n{"seconds":1}'),
        "aio_shell_kill": req("aio_shell", 'kill\n{}'),
        "aio_session_delete": req("aio_session_delete", "s1"),
        "aio_bash": req("aio_bash", '{"command":"echo $K","env":{"K":"v","N":null},'
                                    '"hard_timeout":5,"max_output_length":10}'),
        "aio_file_write": req("aio_file", 'write\n{"file":"%s/a.txt","content":"AAEC",'
                                          '"encoding":"base64","append":false}' % W),
        "aio_file_read": req("aio_file", 'read\n{"file":"%s/a.txt","start_line":0,"end_line":1}' % W),
        "aio_file_list": req("aio_file", 'list\n{"path":"/mnt/user-data","recursive":true,'
                                         '"show_hidden":false,"sort_by":"size","sort_desc":true,'
                                         '"file_types":[".txt"]}'),
        "aio_file_find": req("aio_file", 'find\n{"path":"/mnt/user-data","glob":"**/*.txt"}'),
        "aio_file_grep": req("aio_file", 'grep\n{"path":"/mnt/user-data","pattern":"a+",'
                                         '"case_insensitive":true,"fixed_strings":false,'
                                         '"max_results":400,"max_file_size":"1M","include":["*.txt"]}'),
        "aio_download": req("aio_download", "?path=%s/a.txt" % W),
        "health_head": req("health", flags=HEAD | V1_TOGGLE),
        # OpenSandbox's SDK create body (the image is declared in the target's configuration)
        "create_sdk": req("create", '{"image":{"uri":"ubuntu"},"entrypoint":["/bin/sh"],'
                                    '"timeout":60,"resourceLimits":{"cpu":"1","memory":"512Mi"},'
                                    '"env":{},"metadata":{}}'),
        "create_full": req("create", '{"image":{"uri":"host"},"entrypoint":["sleep","30"],'
                                     '"timeout":120,"resourceLimits":{"cpu":"500m",'
                                     '"memory":"128Mi","gpu":"0"},"env":{"A":"1","B":null},'
                                     '"metadata":{"team":"ml","app.kubernetes.io/name":"x"},'
                                     '"platform":{"os":"linux","arch":"amd64"},'
                                     '"networkPolicy":{"defaultAction":"deny"},'
                                     '"secureAccess":true,"extensions":{"k":"v"},'
                                     '"volumes":[{"name":"data","pvc":{"claimName":"shared"},'
                                     '"mountPath":"/data","readOnly":false,"subPath":"s"}]}',
                              CHUNKED),
        "create_bad_json": req("create", '{"image":'),
        "create_not_object": req("create", "[]"),
        "create_snapshot": req("create", '{"image":{"uri":"host"},"snapshotId":"s",'
                                         '"entrypoint":["a"],"resourceLimits":{}}'),
        "create_short_timeout": req("create", '{"image":{"uri":"host"},"entrypoint":["a"],'
                                              '"timeout":59,"resourceLimits":{}}'),
        "create_bad_limits": req("create", '{"image":{"uri":"host"},"entrypoint":["a"],'
                                           '"resourceLimits":{"cpu":"-1","memory":"12Qi"}}'),
        "create_bad_env": req("create", '{"image":{"uri":"host"},"entrypoint":["a"],'
                                        '"resourceLimits":{},"env":{"1A":"x"}}'),
        "create_reserved_label": req("create", '{"image":{"uri":"host"},"entrypoint":["a"],'
                                               '"resourceLimits":{},'
                                               '"metadata":{"opensandbox.io/x":"y"}}'),
        "create_bad_volume": req("create", '{"image":{"uri":"host"},"entrypoint":["a"],'
                                           '"resourceLimits":{},"volumes":[{"name":"v",'
                                           '"host":{"path":"/etc"},"mountPath":"rel"}]}'),
        "create_unknown_image": req("create", '{"image":{"uri":"nope:1"},"entrypoint":["a"],'
                                              '"resourceLimits":{}}', EXPECT),
        "list": req("list", "?state=Running&state=paused&metadata=team%3Dml%26b%3Dc"
                            "&page=1&pageSize=10"),
        "list_bad": req("list", "?page=0&pageSize=abc&metadata=%zz", V1_TOGGLE),
        "get": req("get"),
        "get_unknown": req("get", "", UNKNOWN_ID),
        "delete": req("delete"),
        "delete_unknown": req("delete", "", UNKNOWN_ID | V1_TOGGLE),
        "metadata": req("metadata", '{"team":"ml","old":null}'),
        "metadata_reserved": req("metadata", '{"opensandbox.io/x":"y","a":1}'),
        "pause": req("pause"),
        "resume": req("resume"),
        "renew": req("renew", '{"expiresAt":"2030-01-01T00:00:00.000+02:00"}'),
        "renew_bad": req("renew", '{"expiresAt":"yesterday"}'),
        "endpoint": req("endpoint", "44772"),
        "endpoint_proxy": req("endpoint", "8080?use_server_proxy=true\nHost: example.com:9"),
        "endpoint_bad": req("endpoint", "0?use_server_proxy=maybe&expires=1"),
        "events": req("events", '{"events":[{"name":"x"}]}'),
        "snapshots": req("snapshots", "/s1"),
        "acquire": req("acquire", '{"user":"u1","thread":"t1"}'),
        "acquire_bad": req("acquire", '{"user":1,"thread":"../x"}'),
        "release": req("release", '{"sandbox_id":"{ID}"}'),
        "contract_execute": req("contract", 'execute_command\n{"command":"echo hi; echo e >&2",'
                                            '"timeout":5,"env":{"A":"1"},"cwd":"/tmp"}'),
        "contract_read": req("contract", 'read_file\n{"path":"%s/a.txt","start_line":1,'
                                         '"end_line":2}' % W),
        "contract_write": req("contract", 'write_file\n{"path":"%s/b.txt","content":"x\\n",'
                                          '"append":true}' % W),
        "contract_update": req("contract", 'update_file\n{"path":"%s/c.bin",'
                                           '"content_base64":"AAEC/w=="}' % W),
        "contract_download": req("contract", 'download_file\n{"path":"%s/a.txt"}' % W),
        "contract_list_dir": req("contract", 'list_dir\n{"path":"/mnt/user-data","max_depth":2}'),
        "contract_glob": req("contract", 'glob\n{"path":"/mnt/user-data","pattern":"**/*.txt",'
                                         '"include_dirs":true,"max_results":5}'),
        "contract_grep": req("contract", 'grep\n{"path":"/mnt/user-data","pattern":"t(wo|hree)",'
                                         '"glob":"*.txt","literal":false,'
                                         '"case_sensitive":false,"max_results":3}'),
        "contract_bad": req("contract", "nope\n{}"),
        "ping": req("ping"),
        "ping_proxy_form": req("ping", "", PROXY_FORM | V1_TOGGLE),
        "ping_no_token": req("ping", "", NO_TOKEN),
        "command": req("command", '{"command":"echo hello; printf \'a\\r\\nb\\rc\' >&2",'
                                  '"cwd":"/tmp","timeout":5000,"envs":{"A":"1"}}'),
        "command_background": req("command", '{"command":"sleep 0.2","background":true}',
                                  CHUNKED),
        "command_bad": req("command", '{"command":"x","uid":0,"gid":0,"timeout":-1}'),
        "command_empty": req("command", ""),
        "interrupt": req("interrupt", "?id=abc"),
        "interrupt_missing": req("interrupt", ""),
        "status": req("status", "abc"),
        "logs": req("logs", "abc/logs?cursor=0"),
        "session": req("session", '{"cwd":"/tmp"}'),
        "session_run": req("session_run", '{SESSION}/run\n{"command":"cd /tmp; export X=1; '
                                          'echo $X","timeout":5000}'),
        "session_delete": req("session_delete", "nosuch"),
        "metrics": req("metrics"),
        "files_info": req("files_info", "?path=%s/a.txt&path=/etc/hostname" % W),
        "files_delete": req("files_delete", "?path=/tmp/x&path=/tmp"),
        "files_mv": req("files_mv", '[{"src":"%s/a.txt","dest":"/tmp/b/a.txt"},'
                                    '{"src":"/tmp/b/a.txt","dest":"%s/a.txt"}]' % (W, W)),
        "files_perm": req("files_perm", '{"%s/a.txt":{"mode":644,"owner":"root",'
                                        '"group":"root"},"/tmp":{"mode":999}}' % W),
        "files_search": req("files_search", "?path=/mnt/user-data&pattern=**/*.{txt,bin}"),
        "files_replace": req("files_replace", '?verbose=true\n{"%s/a.txt":{"old":"one",'
                                              '"new":"ONE"}}' % W),
        "upload": req("upload", mp((meta, b'{"path":"%s/up.txt","mode":644}' % W.encode()),
                                   (filep, b"uploaded\r\nbytes\x00\xff"))),
        "upload_file_first": req("upload", mp((filep, b"data"),
                                              (meta, b'{"path":"/tmp/u2","owner":"root"}'))),
        "upload_cut": req("upload", mp((meta, b'{"path":"/tmp/u3"}'), (filep, b"abc"),
                                       end=False)),
        "upload_bad_metadata": req("upload", mp((meta, b'{"path":'), (filep, b"x"))),
        "download": req("download", "?path=%s/a.txt\nRange: bytes=0-3" % W),
        "download_suffix_range": req("download", "?path=%s/a.txt\nRange: bytes=-5,0-1" % W),
        "download_lines": req("download", "?path=%s/a.txt&offset=1&limit=2" % W),
        "download_dir": req("download", "?path=/tmp\nRange: bytes=abc"),
        "download_climb": req("download", "?path=~/../../etc/hostname"),
        "download_encoded": req("download", "?path=%2Fetc%2Fhostname&path=x"),
        "dir_list": req("dir_list", "?path=/mnt/user-data&depth=2"),
        "mkdir": req("mkdir", '{"/tmp/d1/d2":{"mode":755},"/tmp/d3":{}}'),
        "rmdir": req("rmdir", "?path=/tmp/d1&path=/tmp/d3"),
        "execd_proxy": req("execd_proxy", "8080/x?y=1"),
        "execd_proxy_bad": req("execd_proxy", "0/"),
        "port": req("port", "8080/app?x=1\nX-Forwarded-For: 1.2.3.4"),
        "port_bad": req("port", "99999/"),
        "code": req("code", "{}"),
        # on the wire as they are
        "raw_health": raw(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
        "raw_preflight": raw(b"OPTIONS /v1/sandboxes HTTP/1.1\r\nHost: x\r\nOrigin: http://a\r\n"
                             b"Access-Control-Request-Method: POST\r\n"
                             b"Access-Control-Request-Headers: content-type\r\n\r\n"),
        "raw_pipelined": raw(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n"),
        "raw_http10": raw(b"GET /v1/sandboxes/{ID} HTTP/1.0\r\n\r\n"),
        "raw_http01": raw(b"GET /health HTTP/0.1\r\nHost: x\r\n\r\n"),
        "raw_request_id": raw(b"GET /v1/sandboxes/nope HTTP/1.1\r\nHost: x\r\n"
                              b"X-Request-ID: abc-123\r\n\r\n"),
        "raw_chunked_trailer": raw(b"POST /v1/metrics/events HTTP/1.1\r\nHost: x\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\n"
                                   b"T: v\r\n\r\n"),
        "raw_huge_length": raw(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 99999999999\r\n\r\n{}"),
        "raw_length_and_chunked": raw(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                                      b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"0\r\n\r\n"),
        "raw_absolute_uri": raw(b"GET http://127.0.0.1/health HTTP/1.1\r\nHost: x\r\n\r\n"),
        "raw_execd": raw(b"GET /direct/{ID}/44772/files/download?path=/mnt/user-data/workspace/"
                         b"a.txt HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: {TOKEN}\r\n"
                         b"Range: bytes=1-\r\n\r\n"),
        "raw_traversal": raw(b"GET /direct/{ID}/44772/../../../health HTTP/1.1\r\nHost: x\r\n"
                             b"X-EXECD-ACCESS-TOKEN: {TOKEN}\r\n\r\n"),
        "raw_encoded_slash": raw(b"GET /v1/sandboxes%2F{ID}%2Fendpoints/44772 HTTP/1.1\r\n"
                                 b"Host: x\r\n\r\n"),
        "raw_garbage": raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
        "raw_lf_only": raw(b"GET /health HTTP/1.1\nHost: x\n\n"),
        # regression: a session whose cwd cannot be created (read-only /) leaked the library's
        # error (found by fuzz_sbxd_request)
        "regress-session-cwd-error-leak": req("session", '{"cwd":"/pmp"}'),
        # regression: "/" has no path segment, and the routers computed NULL + 0 (UBSan; found
        # by fuzz_sbxd_request)
        "regress-root-path": raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        "raw_long_header": raw(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 70000 +
                               b"\r\n\r\n")[:65536],
    }
    for k, v in seeds.items():
        write(k, v, "sbxd_request")


def dbus_reply_seeds():
    """Replies as systemd's private socket sends them (little endian D-Bus messages)."""
    def pad(b, a):
        return b + b"\0" * (-len(b) % a)

    def string(b, v):
        b = pad(b, 4)
        return b + struct.pack("<I", len(v)) + v.encode() + b"\0"

    def sig(b, v):
        return b + bytes([len(v)]) + v.encode() + b"\0"

    def field(b, code, t, v):
        b = sig(pad(b, 8) + bytes([code]), t)
        if t == "g":
            return sig(b, v)
        if t == "u":
            return pad(b, 4) + struct.pack("<I", v)
        return string(b, v)

    def msg(typ, fields, body):
        f = b"\0" * 16  # offsets count from the message's start
        for code, t, v in fields:
            f = field(f, code, t, v)
        f = f[16:]
        m = b"l" + bytes([typ, 0, 1]) + struct.pack("<III", len(body), 7, len(f)) + f
        return pad(m, 8) + body

    ok = msg(2, [(5, "u", 1), (8, "g", "o")], string(b"", "/org/freedesktop/systemd1/job/42"))
    err = msg(3, [(4, "s", "org.freedesktop.systemd1.UnitExists"), (5, "u", 1), (8, "g", "s")],
              string(b"", "Unit sbx-x.scope already exists."))
    signal = msg(4, [(1, "o", "/org/freedesktop/systemd1"),
                     (2, "s", "org.freedesktop.systemd1.Manager"), (3, "s", "JobRemoved")], b"")
    for k, v in {"return": ok, "error": err, "signal": signal, "two": ok + err}.items():
        write(k, v, "dbus_reply")
def session_seeds():
    """fuzz_session: u16 split, the client's frames during an exec, then sbx-init's answer."""
    def seed(name, client, server):
        write(name, struct.pack("<H", len(client)) + client + server, "session")
    seed("stdin-eof", frame("STDIN", b"hello\n") + frame("STDIN", bytes(range(256))) +
         frame("STDIN_EOF") + frame("STDIN", b"after eof"),
         frame("STDOUT", b"hello\n") + frame("STDERR", b"warn") +
         frame("EXIT", fields(("CODE", 0), ("SIGNALED", 0))))
    seed("resize-signal", frame("RESIZE", fields(("ROWS", 40), ("COLS", 120))) +
         frame("SIGNAL", fields(("SIGNO", 2))) + frame("STDIN", b"x" * 40000),
         frame("STDOUT", b"\x1b[2J") + frame("EXIT", fields(("CODE", -9), ("SIGNALED", 1))) +
         frame("STDOUT", b"late"))
    seed("error", frame("HELLO"), frame("ERR", fields(("KIND", 3), ("STATUS", 5), ("MSG", "x"))))


if __name__ == "__main__":
    session_seeds()
    agent_seeds()
    proto_seeds()
    tlv_seeds()
    launch_spec_seeds()
    text_seeds()
    paths_seeds()
    sbxd_http_seeds()
    sbxd_request_seeds()
    dbus_reply_seeds()
