#!/usr/bin/env python3
"""Keystroke round trip through a terminal: write one byte to the terminal a front-end runs on,
read its echo back. The program at the far end is `cat` on a terminal in raw mode (so each byte
is read and written back by a process, as an editor or a REPL would), started by:

  sbx      sbx exec --tty -t THREAD -- 'stty raw -echo; cat'   (the sandbox's terminal)
  sbxd     an sbxd PTY session with that command, over its WebSocket (/pty/{id}/ws: a binary
           0x00 frame with the byte out, the 0x01 frame with its echo back); the client is
           this script's own minimal RFC 6455 client over a loopback TCP socket
  script   script -qfc 'stty raw -echo; cat' /dev/null         (a local pty: the floor)
  docker   docker exec -it CONTAINER sh -c 'stty raw -echo; cat'   (when BENCH_DOCKER names one)
  podman   the same with podman (BENCH_PODMAN)

Cases are interleaved byte by byte (round-robin), so load on the machine hits them alike.
Usage: bench/keystroke.py [--build DIR] [--rounds N] [--json]; prints p50/p90/p99 in ms."""
import argparse
import base64
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
INNER = "stty raw -echo; cat"


def spawn(argv):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    return pid, fd


def roundtrip(fd, byte, timeout=5.0):
    t0 = time.perf_counter_ns()
    os.write(fd, byte)
    deadline = time.time() + timeout
    seen = b""
    while byte not in seen:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not r:
            raise TimeoutError("no echo")
        seen += os.read(fd, 4096)
    return (time.perf_counter_ns() - t0) / 1e6


def ready(fd, timeout=30.0):
    """Sends a byte until it comes back (the far end is up and in raw mode), then drains."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            roundtrip(fd, b"r", timeout=0.5)
            break
        except TimeoutError:
            continue
    else:
        raise TimeoutError("the far end never echoed")
    time.sleep(0.2)
    while select.select([fd], [], [], 0.05)[0]:
        os.read(fd, 65536)


class SbxdPty:
    """sbxd on loopback, a sandbox, a PTY session running INNER, its WebSocket."""

    def __init__(self, build, home):
        self.key = "keystroke"
        self.proc = subprocess.Popen(
            [os.path.join(build, "sbxd"), "--listen", "127.0.0.1:0", "--home", home,
             "--api-key", self.key], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        for line in self.proc.stderr:
            rec = json.loads(line)
            if rec.get("msg") == "listening":
                self.addr = rec["address"]
                break
        else:
            raise RuntimeError("sbxd did not start")
        sb = self.call("POST", "/v1/sandboxes", {"image": {"uri": "host"}, "timeout": 600,
                                                 "entrypoint": ["tail", "-f", "/dev/null"],
                                                 "resourceLimits": {}})
        while self.call("GET", "/v1/sandboxes/" + sb["id"])["status"]["state"] != "Running":
            time.sleep(0.1)
        ep = self.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sb["id"])
        self.base = "/" + ep["endpoint"].split("/", 1)[1]
        sid = self.call("POST", self.base + "/pty", {"command": INNER})["session_id"]
        self.sock = socket.create_connection(tuple(self.addr.rsplit(":", 1)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s/pty/%s/ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                           "Sec-WebSocket-Key: %s\r\nOPEN-SANDBOX-API-KEY: %s\r\n\r\n"
                           % (self.base, sid, self.addr, key, self.key)).encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(head.decode())

    def call(self, method, path, body=None):
        req = urllib.request.Request("http://" + self.addr + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"OPEN-SANDBOX-API-KEY": self.key,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read() or b"null")

    def frame(self, timeout):
        """The next server frame's payload (None on time-out)."""
        while True:
            if len(self.buf) >= 2:
                n, h = self.buf[1] & 0x7F, 2
                if n == 126 and len(self.buf) >= 4:
                    n, h = int.from_bytes(self.buf[2:4], "big"), 4
                elif n == 127 and len(self.buf) >= 10:
                    n, h = int.from_bytes(self.buf[2:10], "big"), 10
                if n < 126 or h > 2:
                    if len(self.buf) >= h + n:
                        p, self.buf = self.buf[h:h + n], self.buf[h + n:]
                        return p
            if not select.select([self.sock], [], [], timeout)[0]:
                return None
            self.buf += self.sock.recv(65536)

    def roundtrip(self, byte, timeout=5.0):
        t0 = time.perf_counter_ns()
        payload = b"\x00" + byte
        mask = os.urandom(4)
        self.sock.sendall(bytes([0x82, 0x80 | len(payload)]) + mask +
                          bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        seen = b""
        while byte not in seen:
            p = self.frame(timeout)
            if p is None:
                raise TimeoutError("no echo")
            if p[:1] in (b"\x01", b"\x03"):
                seen += p[1:]
        return (time.perf_counter_ns() - t0) / 1e6

    def ready(self):
        for _ in range(60):
            try:
                self.roundtrip(b"r", timeout=0.5)
                break
            except TimeoutError:
                continue
        time.sleep(0.2)
        while self.frame(0.05) is not None:
            pass

    def close(self):
        self.sock.close()
        self.proc.terminate()
        self.proc.wait()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sbx-keystroke-")
    sbx = [os.path.join(a.build, "sbx"), "--home", home]
    subprocess.run(sbx + ["exec", "-t", "ks", "--", "true"], check=True)
    cases = {"sbx exec --tty": sbx + ["exec", "-t", "ks", "--tty", "--", INNER]}
    if shutil.which("script"):
        cases["script (local pty)"] = ["script", "-qfc", INNER, "/dev/null"]
    for tool in ("docker", "podman"):
        name = os.environ.get("BENCH_" + tool.upper())
        if name and shutil.which(tool):
            cases[tool + " exec -it"] = [tool, "exec", "-it", name, "sh", "-c", INNER]
    procs = {}
    rts = {}
    sbxd = None
    try:
        for k, argv in cases.items():
            procs[k] = spawn(argv)
            ready(procs[k][1])
            rts[k] = (lambda fd: lambda b: roundtrip(fd, b))(procs[k][1])
        if os.path.exists(os.path.join(a.build, "sbxd")):
            sbxd = SbxdPty(a.build, home + "-sbxd")
            sbxd.ready()
            rts["sbxd PTY WebSocket"] = sbxd.roundtrip
        samples = {k: [] for k in rts}
        names = list(rts)
        for i in range(a.rounds):
            for j in range(len(names)):
                k = names[(i + j) % len(names)]
                samples[k].append(rts[k](b"abcdefghij"[i % 10:i % 10 + 1]))
    finally:
        if sbxd:
            sbxd.close()
            subprocess.run([sbx[0], "--home", home + "-sbxd", "down"], capture_output=True)
            shutil.rmtree(home + "-sbxd", ignore_errors=True)
        for pid, fd in procs.values():
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(fd)
        subprocess.run(sbx + ["down"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    res = {k: {"n": len(v), "p50_ms": pct(v, 50), "p90_ms": pct(v, 90), "p99_ms": pct(v, 99)}
           for k, v in samples.items()}
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print("| front-end | n | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|")
        for k, r in res.items():
            print("| %s | %d | %.3f | %.3f | %.3f |" % (k, r["n"], r["p50_ms"], r["p90_ms"],
                                                      r["p99_ms"]))


if __name__ == "__main__":
    sys.exit(main())
