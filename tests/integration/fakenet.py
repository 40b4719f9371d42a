"""A fake internet for the egress tests (docs/network.md), made of network namespaces the test
creates and removes; nothing in it routes to the real network, and the host's own network is
not touched.

    "inet"  the internet: a DNS server (fakedns.py) at 203.0.113.53 and one HTTP server on
            0.0.0.0:8080 answering every address on its loopback: 203.0.113.10 (pypi.test),
            .20 (*.cdn.test), .30 (denied.test), .40 (no name), 10.77.0.1 (a private address;
            also what rebind.test answers); tcpsrv.py's servers on 203.0.113.10:9000-9002
            (hash what is sent, send a blob, hold a connection open).
    "host"  where sbx runs (its pasta's host side): 198.51.100.2/24 on a veth to inet
            (198.51.100.1, the default gateway), plus 192.0.2.77 on its loopback with an HTTP
            server of its own (a host address: always denied), and one on 127.0.0.1:18080.

sbx runs in "host" with a private mount namespace whose /etc/resolv.conf names the inet DNS."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = {
    "pypi.test": "203.0.113.10",
    "*.cdn.test": "203.0.113.20",
    "denied.test": "203.0.113.30",
    "rebind.test": "10.77.0.1",
    "hostaddr.test": "192.0.2.77",
}
INET_ADDRS = ["203.0.113.10", "203.0.113.20", "203.0.113.30", "203.0.113.40", "203.0.113.53",
              "10.77.0.1"]
HOST_ADDR = "192.0.2.77"


def available():
    return os.geteuid() == 0 and shutil.which("pasta") and shutil.which("nft") and \
        shutil.which("ip") and shutil.which("nsenter")


def _ip(*args, ns=None):
    cmd = ["ip"] + (["-n", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True)


class FakeNet:
    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.inet, self.host = "sbxt-i-" + tag, "sbxt-h-" + tag
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="sbx-fakenet-")
        self.resolv = os.path.join(self.dir, "resolv.conf")
        with open(self.resolv, "w") as f:
            f.write("nameserver 203.0.113.53\n")
        for name in ("index.html",):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write("fake internet\n")
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _spawn(self, ns, *cmd):
        p = subprocess.Popen(["ip", "netns", "exec", ns] + list(cmd), stdout=subprocess.PIPE,
                             stderr=open(os.path.join(self.dir, "log-%d" % len(self.procs)), "w"), cwd=self.dir)
        self.procs.append(p)
        return p

    def _build(self):
        subprocess.run(["ip", "netns", "add", self.inet], check=True)
        subprocess.run(["ip", "netns", "add", self.host], check=True)
        veth_h, veth_i = "sbxh" + self.host[-6:], "sbxi" + self.host[-6:]
        _ip("link", "add", veth_h, "netns", self.host, "type", "veth", "peer", "name", veth_i,
            "netns", self.inet)
        _ip("link", "set", "lo", "up", ns=self.inet)
        _ip("addr", "add", "198.51.100.1/24", "dev", veth_i, ns=self.inet)
        _ip("link", "set", veth_i, "up", ns=self.inet)
        for a in INET_ADDRS:
            _ip("addr", "add", a + "/32", "dev", "lo", ns=self.inet)
        _ip("link", "set", "lo", "up", ns=self.host)
        _ip("addr", "add", "198.51.100.2/24", "dev", veth_h, ns=self.host)
        _ip("link", "set", veth_h, "up", ns=self.host)
        _ip("route", "add", "default", "via", "198.51.100.1", ns=self.host)
        _ip("addr", "add", HOST_ADDR + "/32", "dev", "lo", ns=self.host)
        # the inet needs a way back to the host's extra address only for the positive control
        _ip("route", "add", HOST_ADDR + "/32", "via", "198.51.100.2", ns=self.inet)
        dns = self._spawn(self.inet, sys.executable, os.path.join(HERE, "fakedns.py"),
                          "203.0.113.53", "53", *["%s=%s" % kv for kv in NAMES.items()])
        assert dns.stdout.readline().strip() == b"ready"
        self._spawn(self.inet, sys.executable, "-m", "http.server", "--bind", "0.0.0.0", "8080")
        tcp = self._spawn(self.inet, sys.executable, os.path.join(HERE, "tcpsrv.py"),
                          "203.0.113.10")
        assert tcp.stdout.readline().strip() == b"ready"
        self._spawn(self.host, sys.executable, "-m", "http.server", "--bind", HOST_ADDR, "8080")
        self._spawn(self.host, sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                    "18080")
        for ns, url in ((self.inet, "http://203.0.113.10:8080/"),
                        (self.host, "http://%s:8080/" % HOST_ADDR),
                        (self.host, "http://127.0.0.1:18080/"),
                        (self.host, "http://203.0.113.40:8080/")):
            deadline = time.monotonic() + 30  # python's startup, on a loaded machine
            while True:
                r = subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", "-m", "1", "-o",
                                    "/dev/null", url], capture_output=True)
                if r.returncode == 0:
                    break
                time.sleep(0.05)
                if time.monotonic() > deadline:
                    raise RuntimeError("fake internet: %s unreachable from %s" % (url, ns))

    def wrap(self, cmd):
        """cmd run in the host namespace, with the fake resolv.conf (a mount of its own)."""
        return ["nsenter", "--net=/run/netns/" + self.host, "unshare", "-m", "--propagation",
                "private", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"',
                self.resolv] + list(cmd)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in (self.inet, self.host):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
