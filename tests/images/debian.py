#!/usr/bin/env python3
"""A Debian 12 image with python3 and pip, made with debootstrap --variant=minbase from the
mirror apt uses, cached between runs ($SBX_TEST_IMAGE_CACHE, default
/var/cache/sbx-test-images/debian-py), and packed as a one-layer docker-archive.

    python3 debian.py OUT.tar [--name debian-py:12]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile

CACHE = os.environ.get("SBX_TEST_IMAGE_CACHE", "/var/cache/sbx-test-images")


def mirror():
    """The Debian mirror apt uses here (deb.debian.org if none is found)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            text = open(path).read()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or \
            re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)\s+bookworm", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def rootfs():
    """The cached root file system, made on first use. Raises on failure (offline...)."""
    root = os.path.join(CACHE, "debian-py")
    if os.path.isfile(os.path.join(root, "usr", "bin", "python3")):
        return root
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed")
    os.makedirs(CACHE, exist_ok=True)
    part = root + ".partial"
    shutil.rmtree(part, ignore_errors=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-pip",
                    "bookworm", part, mirror()], check=True, capture_output=True, timeout=1800)
    shutil.rmtree(os.path.join(part, "var", "cache", "apt", "archives"), ignore_errors=True)
    os.rename(part, root)
    return root


def pack(root, out, name="debian-py:12"):
    work = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(out)))
    try:
        layer = os.path.join(work, "layer.tar")
        subprocess.run(["tar", "-C", root, "--numeric-owner", "--xattrs", "--exclude=./proc/*",
                        "--exclude=./sys/*", "--exclude=./dev/*", "-cf", layer, "."], check=True)
        h = hashlib.sha256()
        with open(layer, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        diff = h.hexdigest()
        cfg = json.dumps({"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
                          "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                             "LANG=C.UTF-8"], "Cmd": ["python3"]},
                          "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]}}).encode()
        ch = hashlib.sha256(cfg).hexdigest()
        manifest = json.dumps([{"Config": ch + ".json", "RepoTags": [name],
                                "Layers": [diff + "/layer.tar"]}]).encode()
        with tarfile.open(out, "w") as t:
            for arcname, data in ((ch + ".json", cfg), ("manifest.json", manifest)):
                ti = tarfile.TarInfo(arcname)
                ti.size = len(data)
                import io
                t.addfile(ti, io.BytesIO(data))
            t.add(layer, arcname=diff + "/layer.tar")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--name", default="debian-py:12")
    a = ap.parse_args()
    pack(rootfs(), a.out, a.name)


if __name__ == "__main__":
    main()
