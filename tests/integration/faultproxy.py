"""A fault-injecting HTTP proxy for the opensandbox backend's tests (loopback only).

It forwards everything to a real sbxd and, on request, injects the faults a remote deployment
can produce: an HTTP status on a path (e.g. 410 on the command path), a command stream whose
terminal event is replaced (`context deadline exceeded`, a signal's -1, a failed bootstrap),
a download throttled to a crawl. Endpoint replies are rewritten to point at the proxy, so execd
traffic passes through it too."""
import http.client
import http.server
import json
import re
import socketserver
import threading
import time


class Rule:
    def __init__(self, method, path_re, action, times=None, skip=0):
        self.method = method
        self.path_re = re.compile(path_re)
        self.action = action  # ("status", 410) | ("terminal", event_dict) | ("throttle", bytes_per_s)
        self.times = times    # None = always; N = the next N matches
        self.skip = skip      # let this many matches through first

    def matches(self, method, path):
        if self.times is not None and self.times <= 0:
            return False
        if not ((self.method in (None, method)) and self.path_re.search(path) is not None):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        return True


class FaultProxy:
    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.rules = []
        self.lock = threading.Lock()
        self.log = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _rule(self):
                with proxy.lock:
                    for r in proxy.rules:
                        if r.matches(self.command, self.path):
                            if r.times is not None:
                                r.times -= 1
                            return r
                return None

            def _forward(self):
                proxy.log.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                rule = self._rule()
                if rule and rule.action[0] == "status":
                    data = json.dumps({"code": "INJECTED", "message": "injected fault"}).encode()
                    self.send_response(rule.action[1])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=600)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "transfer-encoding",
                                                "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data_stream = resp
                ctype = resp.getheader("Content-Type", "")
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                if "/endpoints/" in self.path:
                    raw = resp.read()
                    try:
                        o = json.loads(raw)
                        host = "127.0.0.1:%d" % proxy.upstream[1]
                        o["endpoint"] = o["endpoint"].replace(host, "127.0.0.1:%d" % proxy.port)
                        raw = json.dumps(o).encode()
                    except (ValueError, KeyError):
                        pass
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    conn.close()
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                throttle = rule.action[1] if rule and rule.action[0] == "throttle" else None
                terminal = rule.action[1] if rule and rule.action[0] == "terminal" else None
                pending = b""
                while True:
                    chunk = data_stream.read1(65536) if throttle is None else data_stream.read1(max(1, throttle // 10))
                    if not chunk:
                        break
                    if terminal is not None:
                        # drop the real terminal event, keep the output events
                        pending += chunk
                        lines = pending.split(b"\n")
                        pending = lines.pop()
                        out = []
                        for line in lines:
                            s = line.strip()
                            if s.startswith(b"data:"):
                                s = s[5:].strip()
                            try:
                                ev = json.loads(s) if s else None
                            except ValueError:
                                ev = None
                            if ev and ev.get("type") in ("execution_complete", "error"):
                                continue
                            out.append(line)
                        chunk = b"\n".join(out) + (b"\n" if out else b"")
                        if not chunk:
                            continue
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    except OSError:
                        break
                    if throttle is not None:
                        time.sleep(0.1)
                if terminal is not None:
                    ev = json.dumps(dict(terminal, timestamp=int(time.time() * 1000))).encode() + b"\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
                conn.close()

            def _read_chunked(self):
                out = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _forward

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, method, path_re, action, times=None, skip=0):
        with self.lock:
            self.rules.append(Rule(method, path_re, action, times, skip))

    def clear(self):
        with self.lock:
            self.rules.clear()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
