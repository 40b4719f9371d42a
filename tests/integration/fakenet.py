"""A fake internet for the egress tests (docs/network.md), made of network namespaces the test
creates and removes; nothing in it routes to the real network, and the host's own network is
not touched.

    "inet"  the internet: a DNS server (fakedns.py) at 203.0.113.53 (A and AAAA) and one HTTP
            server on [::]:8080 (both families) answering every address on its loopback:
            203.0.113.10 and 2001:db8:113::10 (pypi.test and other.test), .20 / ::20 (*.cdn.test), .30 / ::30
            (denied.test), .40 / ::40 (no name), 10.77.0.1 and fd00::10 (private addresses; also
            what rebind.test answers), fd00:ec2::254 (a metadata address); tcpsrv.py's servers on
            203.0.113.10:9000-9002 (hash what is sent, send a blob, hold a connection open).
    "host"  where sbx runs (its pasta's host side): 198.51.100.2/24 and 2001:db8:100::2/64 on a
            veth to inet (198.51.100.1 and 2001:db8:100::1, the default gateways), plus
            192.0.2.77 and 2001:db8:77::77 on its loopback with an HTTP server of their own (host
            addresses: always denied), and one on 127.0.0.1:18080 and [::1]:18080.

sbx runs in "host" with a private mount namespace whose /etc/resolv.conf names the inet DNS.
forward() reaches a TCP port of the "host" namespace (sbxd's) from the test's own namespace."""
import ctypes
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = {
    "pypi.test": "203.0.113.10,2001:db8:113::10",
    # another name on pypi.test's addresses (the Host / SNI check's domain fronting)
    "other.test": "203.0.113.10,2001:db8:113::10",
    "*.cdn.test": "203.0.113.20,2001:db8:113::20",
    "denied.test": "203.0.113.30,2001:db8:113::30",
    "rebind.test": "10.77.0.1,fd00::10",
    "hostaddr.test": "192.0.2.77,2001:db8:77::77",
    # 40 addresses: over 512 bytes, so its UDP answer is truncated (the TCP retry gets them all)
    "big.test": ",".join(["203.0.113.40"] + ["198.18.0.%d" % i for i in range(1, 40)]),
}
INET_ADDRS = ["203.0.113.10", "203.0.113.20", "203.0.113.30", "203.0.113.40", "203.0.113.53",
              "10.77.0.1"]
INET_ADDRS6 = ["2001:db8:113::10", "2001:db8:113::20", "2001:db8:113::30", "2001:db8:113::40",
               "fd00::10", "fd00:ec2::254"]
HOST_ADDR = "192.0.2.77"
HOST_ADDR6 = "2001:db8:77::77"
CLONE_NEWNET = 0x40000000


class Wrapped:
    """For the tests' Sbx drivers (class NetSbx(fakenet.Wrapped, Sbx)): sbx run in net's host
    namespace, as root, or as user (a test_rootless.User: its copy of sbx, a home it owns)."""

    def __init__(self, home, config, net, user=None, tun_mode=0o666):
        super().__init__(home, config)
        self.net = net
        self.user = user
        self.tun_mode = tun_mode

    def cmd(self, *args):
        c = super().cmd(*args)
        return self.net.wrap([self.user.sbx] + c[1:] if self.user else c, self.user,
                             self.tun_mode)


def folder(tmp_path, user=None, tag="net"):
    """Where a test's homes and configs go: tmp_path as root; as user, a folder of the user's
    own (pytest's tmp_path is below one of root's that the user cannot enter)."""
    if user is None:
        return str(tmp_path)
    top = os.path.join(user.home_dir, "%s-%s" % (tag, os.path.basename(str(tmp_path))))
    os.makedirs(top, exist_ok=True)
    os.chown(top, user.uid, user.gid)
    return top


def write_config(top, name, text, user=None):
    """A config file in top that whoever runs sbx (root, or user) can read."""
    path = os.path.join(top, name)
    with open(path, "w") as f:
        f.write(text)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


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
        self.listeners = []
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
        _ip("addr", "add", "2001:db8:100::1/64", "dev", veth_i, "nodad", ns=self.inet)
        _ip("link", "set", veth_i, "up", ns=self.inet)
        for a in INET_ADDRS:
            _ip("addr", "add", a + "/32", "dev", "lo", ns=self.inet)
        for a in INET_ADDRS6:
            _ip("addr", "add", a + "/128", "dev", "lo", ns=self.inet)
        _ip("link", "set", "lo", "up", ns=self.host)
        _ip("addr", "add", "198.51.100.2/24", "dev", veth_h, ns=self.host)
        # nodad: the address is usable at once (no duplicate detection on a two-end veth)
        _ip("addr", "add", "2001:db8:100::2/64", "dev", veth_h, "nodad", ns=self.host)
        _ip("link", "set", veth_h, "up", ns=self.host)
        _ip("route", "add", "default", "via", "198.51.100.1", ns=self.host)
        # a routable IPv6 default route: pasta gives the sandbox IPv6 only when the host has one
        _ip("-6", "route", "add", "default", "via", "2001:db8:100::1", ns=self.host)
        _ip("addr", "add", HOST_ADDR + "/32", "dev", "lo", ns=self.host)
        _ip("addr", "add", HOST_ADDR6 + "/128", "dev", "lo", ns=self.host)
        # the inet needs a way back to the host's extra addresses only for the positive control
        _ip("route", "add", HOST_ADDR + "/32", "via", "198.51.100.2", ns=self.inet)
        _ip("-6", "route", "add", HOST_ADDR6 + "/128", "via", "2001:db8:100::2", ns=self.inet)
        dns = self._spawn(self.inet, sys.executable, os.path.join(HERE, "fakedns.py"),
                          "203.0.113.53", "53", *["%s=%s" % kv for kv in NAMES.items()])
        assert dns.stdout.readline().strip() == b"ready"
        # "::" is both families (http.server's dual-stack server)
        self._spawn(self.inet, sys.executable, "-m", "http.server", "--bind", "::", "8080")
        for addr in (HOST_ADDR, HOST_ADDR6):
            self._spawn(self.host, sys.executable, "-m", "http.server", "--bind", addr, "8080")
        for addr in ("127.0.0.1", "::1"):
            self._spawn(self.host, sys.executable, "-m", "http.server", "--bind", addr, "18080")
        tcp = self._spawn(self.inet, sys.executable, os.path.join(HERE, "tcpsrv.py"),
                          "203.0.113.10")
        assert tcp.stdout.readline().strip() == b"ready"
        for ns, url in ((self.inet, "http://203.0.113.10:8080/"),
                        (self.host, "http://%s:8080/" % HOST_ADDR),
                        (self.host, "http://[%s]:8080/" % HOST_ADDR6),
                        (self.host, "http://127.0.0.1:18080/"),
                        (self.host, "http://[::1]:18080/"),
                        (self.host, "http://203.0.113.40:8080/"),
                        (self.host, "http://[2001:db8:113::40]:8080/"),
                        (self.host, "http://[fd00:ec2::254]:8080/")):
            deadline = time.monotonic() + 30  # python's startup, on a loaded machine
            while True:
                r = subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", "-m", "1", "-o",
                                    "/dev/null", url], capture_output=True)
                if r.returncode == 0:
                    break
                time.sleep(0.05)
                if time.monotonic() > deadline:
                    raise RuntimeError("fake internet: %s unreachable from %s" % (url, ns))

    def wrap(self, cmd, user=None, tun_mode=0o666):
        """cmd run in the host namespace, with the fake resolv.conf (a mount of its own); as
        user (test_rootless.User) if given, with a /dev/net/tun of that mount namespace's own
        of tun_mode (0666, Debian's: anyone may open it; the host's may be 0600, and stays as
        it is)."""
        script = 'mount --bind "$0" /etc/resolv.conf'
        as_user = []
        if user is not None:
            script += (" && mount -t tmpfs -o mode=755 sbx-tun /dev/net"
                       " && mknod -m %o /dev/net/tun c 10 200" % tun_mode)
            as_user = ["setpriv", "--reuid=%d" % user.uid, "--regid=%d" % user.gid,
                       "--init-groups", "--", "env", "HOME=" + user.home_dir, "USER=" + user.name]
        return ["nsenter", "--net=/run/netns/" + self.host, "unshare", "-m", "--propagation",
                "private", "sh", "-c", script + ' && exec "$@"', self.resolv] + as_user + list(cmd)

    def forward(self, port, addr="127.0.0.1"):
        """A port on 127.0.0.1 of the caller's namespace whose connections go to addr:port in
        the "host" namespace (a thread of ours that entered it: setns is per thread)."""
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(64)
        self.listeners.append(lst)

        def pump(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        def serve():
            fd = os.open("/run/netns/" + self.host, os.O_RDONLY)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
            os.close(fd)
            while True:
                try:
                    c, _ = lst.accept()
                except OSError:
                    return  # closed
                try:
                    u = socket.create_connection((addr, port))
                except OSError:
                    c.close()
                    continue
                for a, b in ((c, u), (u, c)):
                    threading.Thread(target=pump, args=(a, b), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        return lst.getsockname()[1]

    def close(self):
        for lst in self.listeners:
            try:
                lst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lst.close()
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in (self.inet, self.host):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
