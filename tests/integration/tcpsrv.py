"""TCP servers of the fake internet (fakenet.py) for the relay's tests:

    tcpsrv.py ADDR   ready on stdout, then serves
      ADDR:9000  hash: reads until EOF, answers "LEN SHA256HEX\n" (after the client's half-close)
                 and closes
      ADDR:9001  blob: reads a line "N\n", sends N bytes of blob(N) and closes
      ADDR:9002  hold: echoes lines until EOF (connections that stay open)"""
import hashlib
import random
import socket
import sys
import threading

BLOCK = random.Random(12).randbytes(1 << 20)


def blob_sha256(n):
    h = hashlib.sha256()
    for off in range(0, n, len(BLOCK)):
        h.update(BLOCK[:min(len(BLOCK), n - off)])
    return h.hexdigest()


def hash_conn(c):
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(b"%d %s\n" % (n, h.hexdigest().encode()))


def blob_conn(c):
    f = c.makefile("rb")
    n = int(f.readline())
    while n > 0:
        k = min(n, len(BLOCK))
        c.sendall(BLOCK[:k])
        n -= k


def hold_conn(c):
    f = c.makefile("rb")
    for line in f:
        c.sendall(line)


def listener(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(512)
    return s


def serve(s, fn):
    def one(c):
        try:
            fn(c)
        except OSError:
            pass
        finally:
            c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


if __name__ == "__main__":
    for port, fn in ((9000, hash_conn), (9001, blob_conn), (9002, hold_conn)):
        threading.Thread(target=serve, args=(listener(sys.argv[1], port), fn), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
