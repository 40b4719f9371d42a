#!/usr/bin/env python3
"""MCP tool-call latency: execute_command `true` over stdio (`sbx mcp`) and over streamable HTTP
(sbxd's /mcp), against the CLI's warm exec (`sbx exec -- true`) and the library's
(sbx_execute_command through libsbx.so, in this process), all on warm sandboxes of one home;
and `ping` over each transport (its round trip alone, no command).

Over HTTP twice: through http.client, and from a bare keep-alive socket (the server's share).
The cases run interleaved, round-robin with the starting case rotating, so machine load hits
them alike; each sample is one whole call (request written to response read). Prints medians
with p10/p90 and each case's ratio to the library's median.

  bench/mcp.py [--build DIR] [-n SAMPLES] [--warmup N] [--json FILE]
"""
import argparse
import ctypes
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


class Stdio:
    def __init__(self, sbx, home, thread):
        self.p = subprocess.Popen([sbx, "--home", home, "mcp", "-t", thread], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, bufsize=0)
        self.n = 0
        self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def rpc(self, method, params):
        self.n += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                       "params": params}).encode() + b"\n")
        m = json.loads(self.p.stdout.readline())
        assert m.get("id") == self.n and "result" in m, m
        return m["result"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


class Http:
    def __init__(self, host, port, key, thread):
        self.c = http.client.HTTPConnection(host, port)
        self.h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                  "Authorization": "Bearer " + key, "Sbx-Thread": thread}
        self.n = 0
        self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.h["Mcp-Session-Id"] = self.sid
        self.h["MCP-Protocol-Version"] = "2025-11-25"
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def post(self, body):
        self.c.request("POST", "/mcp", body, self.h)
        r = self.c.getresponse()
        data = r.read()
        self.sid = r.getheader("Mcp-Session-Id") or getattr(self, "sid", None)
        return r, data

    def rpc(self, method, params):
        self.n += 1
        r, data = self.post(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                        "params": params}).encode())
        text = data.decode()
        if "text/event-stream" in (r.getheader("Content-Type") or ""):
            text = [l[6:] for l in text.split("\n") if l.startswith("data: ")][-1]
        m = json.loads(text)
        assert m.get("id") == self.n and "result" in m, m
        return m["result"]

    def close(self):
        self.c.request("DELETE", "/mcp", headers=self.h)
        self.c.getresponse().read()
        self.c.close()


class HttpRaw:
    """The same over a bare keep-alive socket: the server's share of an HTTP call, without a
    client library's (http.client alone costs ~0.2 ms a request here)."""

    def __init__(self, host, port, key, thread):
        ht = Http(host, port, key, thread)  # a session of its own (initialize, initialized)
        self.sid, self.key = ht.sid, key
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.n = 100

    def rpc(self, method, params):
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}).encode()
        self.s.sendall(("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Accept: application/json, text/event-stream\r\n"
                        f"Authorization: Bearer {self.key}\r\nMcp-Session-Id: {self.sid}\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        buf = b""
        while True:
            chunk = self.s.recv(65536)
            assert chunk, "sbxd closed the connection"
            buf += chunk
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                continue
            head = buf[:i].decode().lower()
            cl = [l.split(":", 1)[1] for l in head.split("\r\n") if l.startswith("content-length:")]
            assert cl, head  # a JSON answer (no progress token: no event stream)
            if len(buf) - i - 4 >= int(cl[0]):
                m = json.loads(buf[i + 4:i + 4 + int(cl[0])])
                assert m.get("id") == self.n and "result" in m, m
                return m["result"]

    def close(self):
        self.s.close()


class Err(ctypes.Structure):  # struct sbx_error_s
    _fields_ = [("status", ctypes.c_int), ("kind", ctypes.c_int), ("msg", ctypes.c_char_p)]


class Lib:
    def __init__(self, build, home, thread):
        os.environ.setdefault("SBX_INIT", os.path.abspath(os.path.join(build, "sbx-init")))
        self.l = ctypes.CDLL(os.path.join(build, "libsbx.so"))
        self.l.sbx_provider_new.restype = ctypes.c_void_p
        self.l.sbx_provider_new.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
        self.l.sbx_acquire.restype = ctypes.c_void_p
        self.l.sbx_acquire.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
        self.l.sbx_execute_command.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p]
        self.l.sbx_exec_result_free.argtypes = [ctypes.c_void_p]
        self.l.sbx_provider_free.argtypes = [ctypes.c_void_p]
        err = ctypes.POINTER(Err)()
        self.l.sbx_config_load.restype = ctypes.c_void_p
        self.l.sbx_config_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        self.cfg = self.l.sbx_config_load(os.path.join(home, "config.yaml").encode(), ctypes.byref(err))
        assert self.cfg, f"sbx_config_load: {err.contents.msg.decode()}"
        self.p = self.l.sbx_provider_new(home.encode(), ctypes.c_void_p(self.cfg), ctypes.byref(err))
        assert self.p, f"sbx_provider_new: {err.contents.msg.decode()}"
        self.sb = self.l.sbx_acquire(self.p, b"default", thread.encode(), ctypes.byref(err))
        assert self.sb, f"sbx_acquire: {err.contents.msg.decode()}"
        self.res = ctypes.create_string_buffer(512)  # struct sbx_exec_result, with room to spare

    def exec(self):
        rc = self.l.sbx_execute_command(self.sb, b"true", None, self.res, None)
        assert rc == 0
        self.l.sbx_exec_result_free(self.res)

    def close(self):
        self.l.sbx_provider_free(self.p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("SBX_BUILD", "build"))
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    sbx, sbxd = os.path.join(a.build, "sbx"), os.path.join(a.build, "sbxd")
    home = tempfile.mkdtemp(prefix="sbx-bench-mcp-")
    key = "bench-key"
    with open(os.path.join(home, "config.yaml"), "w") as f:  # room for the five warm sandboxes
        f.write("sandbox:\n  replicas: 16\n")
    d = None
    clients = []
    try:
        log = open(os.path.join(home, "sbxd.log"), "w+")  # a pipe nobody drains would stall sbxd
        d = subprocess.Popen([sbxd, "--listen", "127.0.0.1:0", "--home", home, "--api-key", key],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        addr = None
        for _ in range(300):
            with open(log.name) as f:
                for line in f:
                    if '"listening"' in line:
                        addr = json.loads(line)["address"]
            if addr or d.poll() is not None:
                break
            time.sleep(0.1)
        assert addr, "sbxd did not start"
        host, port = addr.rsplit(":", 1)
        lib = Lib(a.build, home, "bench-lib")
        st = Stdio(sbx, home, "bench-stdio")
        ht = Http(host, int(port), key, "bench-http")
        hr = HttpRaw(host, int(port), key, "bench-http-raw")
        clients = [st, ht, hr, lib]
        subprocess.run([sbx, "--home", home, "exec", "-t", "bench-cli", "--", "true"], check=True)
        call = {"name": "execute_command", "arguments": {"command": "true"}}
        cases = {
            "lib-exec": lib.exec,
            "cli-exec": lambda: subprocess.run([sbx, "--home", home, "exec", "-t", "bench-cli", "--", "true"],
                                               check=True),
            "mcp-stdio": lambda: st.rpc("tools/call", call),
            "mcp-http": lambda: ht.rpc("tools/call", call),
            "mcp-http-raw": lambda: hr.rpc("tools/call", call),
            # the transports' fixed cost: a round trip that runs nothing
            "stdio-ping": lambda: st.rpc("ping", {}),
            "http-ping": lambda: ht.rpc("ping", {}),
            "http-raw-ping": lambda: hr.rpc("ping", {}),
        }
        names = list(cases)
        samples = {k: [] for k in names}
        for i in range(a.warmup + a.n):
            for j in range(len(names)):
                k = names[(i + j) % len(names)]
                t0 = time.perf_counter()
                cases[k]()
                dt = (time.perf_counter() - t0) * 1000
                if i >= a.warmup:
                    samples[k].append(dt)
        base = statistics.median(samples["lib-exec"])
        print(f"{'case':<13} {'median ms':>10} {'p10':>8} {'p90':>8} {'n':>5} {'x lib':>6}")
        out = {}
        for k in names:
            v = samples[k]
            med = statistics.median(v)
            out[k] = {"median_ms": med, "p10_ms": pct(v, 10), "p90_ms": pct(v, 90), "n": len(v),
                      "ratio_to_lib": med / base}
            print(f"{k:<13} {med:>10.3f} {pct(v, 10):>8.3f} {pct(v, 90):>8.3f} {len(v):>5} {med / base:>6.2f}")
        print(f"load average: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for c in clients:
            try:
                c.close()
            except Exception as e:  # report, keep tearing down
                print(f"close: {e}", file=sys.stderr)
        if d:
            d.terminate()
            d.wait(timeout=30)
        subprocess.run([sbx, "--home", home, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
