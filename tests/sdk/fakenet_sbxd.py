"""sbxd inside the network tests' fake internet (tests/integration/fakenet.py), for the SDK:

    python3 fakenet_sbxd.py SBXD ARG...

builds the fake internet, runs SBXD ARG... in its "host" namespace, passes sbxd's stderr through
with the address of its "listening" line replaced by a forward from this namespace (node cannot
enter a network namespace), relays SIGTERM to sbxd, exits with its status and removes the fake
internet."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import fakenet  # noqa: E402


def main():
    net = fakenet.FakeNet()
    try:
        proc = subprocess.Popen(net.wrap(sys.argv[1:]), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
        for line in proc.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if isinstance(rec, dict) and rec.get("msg") == "listening":
                port = int(rec["address"].rsplit(":", 1)[1])
                rec["address"] = "127.0.0.1:%d" % net.forward(port)
                line = (json.dumps(rec) + "\n").encode()
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
        code = proc.wait()
    finally:
        net.close()
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
