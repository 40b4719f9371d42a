"""A tiny authoritative DNS server for the network tests' fake internet (A and AAAA, over UDP
and TCP with RFC 7766 framing). A UDP answer over 512 bytes is truncated (TC set, no records),
as a server does for a client without EDNS: the client must retry over TCP.

    python3 fakedns.py ADDR PORT NAME=IP[,IP...] ...

A NAME of the form *.zone answers every name below zone. Unknown names get NXDOMAIN; a known
name without a record of the asked type gets an empty answer. Every answer has TTL 60."""
import socket
import struct
import sys
import threading


def parse_name(pkt, off):
    labels = []
    while True:
        n = pkt[off]
        if n == 0:
            return ".".join(labels).lower(), off + 1
        labels.append(pkt[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n


def lookup(table, name):
    if name in table:
        return table[name]
    parts = name.split(".")
    for i in range(1, len(parts)):
        w = "*." + ".".join(parts[i:])
        if w in table:
            return table[w]
    return None


def answer(table, pkt):
    qid, flags, qd = struct.unpack("!HHH", pkt[:6])
    name, end = parse_name(pkt, 12)
    qtype, qclass = struct.unpack("!HH", pkt[end:end + 4])
    question = pkt[12:end + 4]
    ips = lookup(table, name)
    rd = flags & 0x0100
    if ips is None:
        return struct.pack("!HHHHHH", qid, 0x8080 | rd | 3, 1, 0, 0, 0) + question
    rrs = b""
    count = 0
    for ip in ips:
        if ":" in ip and qtype == 28:
            rrs += struct.pack("!HHHIH", 0xC00C, 28, 1, 60, 16) + socket.inet_pton(socket.AF_INET6, ip)
            count += 1
        elif ":" not in ip and qtype == 1:
            rrs += struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(ip)
            count += 1
    return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, count, 0, 0) + question + rrs


def truncated(reply):
    qid, flags = struct.unpack("!HH", reply[:4])
    end = 12
    while reply[end]:
        end += 1 + reply[end]
    return struct.pack("!HHHHHH", qid, flags | 0x0200, 1, 0, 0, 0) + reply[12:end + 5]


def recv_exact(c, n):
    data = b""
    while len(data) < n:
        more = c.recv(n - len(data))
        if not more:
            raise EOFError
        data += more
    return data


def serve_tcp(c, table):
    with c:
        try:
            while True:
                n, = struct.unpack("!H", recv_exact(c, 2))
                reply = answer(table, recv_exact(c, n))
                c.sendall(struct.pack("!H", len(reply)) + reply)
        except Exception:  # closed, or malformed: the connection goes
            pass


def main():
    addr, port = sys.argv[1], int(sys.argv[2])
    table = {}
    for arg in sys.argv[3:]:
        k, v = arg.split("=", 1)
        table[k.lower()] = v.split(",")
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((addr, port))
    t = socket.socket(fam, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((addr, port))
    t.listen(16)

    def accept():
        while True:
            c, _ = t.accept()
            threading.Thread(target=serve_tcp, args=(c, table), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print("ready", flush=True)
    while True:
        pkt, peer = s.recvfrom(4096)
        try:
            reply = answer(table, pkt)
            s.sendto(reply if len(reply) <= 512 else truncated(reply), peer)
        except Exception:  # a malformed query gets no answer
            pass


if __name__ == "__main__":
    main()
