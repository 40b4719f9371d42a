#!/usr/bin/env python3
"""Builds small OCI images offline, for the image tests: layers are tar files made here (from
busybox-static and files given inline), packed as a docker-archive (docker save's layout), an
oci-archive or an OCI layout directory, optionally with gzip or zstd layers and a manifest list.

    python3 mkimage.py OUT.tar [--format docker|oci|oci-dir] [--name busybox:test]
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "ls", "cat", "echo", "id", "stat", "touch", "rm", "mkdir", "true", "false",
           "env", "pwd", "sleep", "readlink", "head", "grep", "wc", "test", "printf", "ln",
           "chmod", "find", "uname", "hostname", "sed", "tar", "cp", "mv", "dd", "df", "du",
           "tail", "seq", "mkfifo"]


def _info(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, size=0, **kw):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.uid, ti.gid, ti.size, ti.mtime = kind, mode, uid, gid, size, 1700000000
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def layer(entries):
    """entries: list of (name, spec); spec is bytes (a file), 'dir', ('link', target),
    ('hard', target), ('dev', major, minor), ('mode', bytes, mode), or a TarInfo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, spec in entries:
            if isinstance(spec, tarfile.TarInfo):
                t.addfile(spec, io.BytesIO(b"\0" * spec.size) if spec.isreg() else None)
            elif isinstance(spec, bytes):
                t.addfile(_info(name, size=len(spec)), io.BytesIO(spec))
            elif spec == "dir":
                t.addfile(_info(name, tarfile.DIRTYPE, 0o755))
            elif spec[0] == "link":
                t.addfile(_info(name, tarfile.SYMTYPE, 0o777, linkname=spec[1]))
            elif spec[0] == "hard":
                t.addfile(_info(name, tarfile.LNKTYPE, 0o644, linkname=spec[1]))
            elif spec[0] == "dev":
                t.addfile(_info(name, tarfile.CHRTYPE, 0o666, devmajor=spec[1], devminor=spec[2]))
            elif spec[0] == "mode":
                t.addfile(_info(name, size=len(spec[1]), mode=spec[2]), io.BytesIO(spec[1]))
            elif spec[0] == "owner":
                t.addfile(_info(name, size=len(spec[1]), uid=spec[2], gid=spec[3]),
                          io.BytesIO(spec[1]))
    return buf.getvalue()


def busybox_layer():
    bb = open(BUSYBOX, "rb").read()
    ents = [("bin", "dir"), ("bin/busybox", ("mode", bb, 0o755)), ("etc", "dir"),
            ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"),
            ("etc/group", b"root:x:0:\nuser:x:1000:\n"), ("root", "dir"), ("tmp", "dir"),
            ("usr", "dir"), ("usr/bin", "dir")]
    ents += [("bin/" + a, ("hard", "bin/busybox")) for a in APPLETS]
    return layer(ents)


# What the OpenSandbox SDK suite (tests/sdk/run.sh's image pass) expects of a Linux image beyond
# the applets above: a second layer, so the suite runs on a multi-layer root
SDK_APPLETS = ["tail", "kill", "timeout", "awk", "base64", "basename", "cut", "dirname", "md5sum",
               "ps", "seq", "sha256sum", "sort", "tr", "which", "xargs", "tee", "mktemp", "chown",
               "stat", "diff", "uniq", "nproc", "whoami", "yes", "od", "xxd", "realpath"]
GETENT = b"""#!/bin/sh
# getent for the files database: passwd and group
db=$1; shift
[ -r /etc/$db ] || exit 1
[ $# -eq 0 ] && exec cat /etc/$db
for k; do grep -E "^$k:|^[^:]*:[^:]*:$k:" /etc/$db || exit 2; done
"""


def sdk_layer():
    ents = [("bin/" + a, ("link", "busybox")) for a in SDK_APPLETS]
    ents += [("bin/getent", ("mode", GETENT, 0o755)), ("var", "dir"), ("var/tmp", "dir"),
             ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"
              b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
             ("etc/group", b"root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n")]
    return layer(ents)


def compress(data, how):
    if how == "gzip":
        return gzip.compress(data, 1), "application/vnd.oci.image.layer.v1.tar+gzip"
    if how == "zstd":
        return (subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                               check=True).stdout, "application/vnd.oci.image.layer.v1.tar+zstd")
    return data, "application/vnd.oci.image.layer.v1.tar"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def config(layers, env=None, arch="amd64"):
    return json.dumps({
        "created": "2024-01-02T03:04:05Z", "architecture": arch, "os": "linux",
        "config": {"Env": env or ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_VAR=from-image"],
                   "Cmd": ["sh"], "WorkingDir": "/", "User": ""},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(l) for l in layers]},
    }).encode()


class Blobs:
    def __init__(self):
        self.files = {}

    def add(self, data):
        d = sha(data)
        self.files["blobs/sha256/" + d] = data
        return {"digest": "sha256:" + d, "size": len(data)}


def oci_image(blobs, layers, compression=None, env=None, arch="amd64"):
    """Adds config, layers and manifest to blobs; returns the manifest descriptor."""
    cfg = config(layers, env, arch)
    ls = []
    for l in layers:
        data, mt = compress(l, compression)
        ls.append(dict(mediaType=mt, **blobs.add(data)))
    m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": dict(mediaType="application/vnd.oci.image.config.v1+json",
                                   **blobs.add(cfg)), "layers": ls}).encode()
    return dict(mediaType="application/vnd.oci.image.manifest.v1+json", **blobs.add(m))


def write_oci(out, files, as_dir):
    if as_dir:
        os.makedirs(out, exist_ok=True)
        for name, data in files.items():
            p = os.path.join(out, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        return
    with tarfile.open(out, "w") as t:
        for name, data in files.items():
            t.addfile(_info(name, size=len(data)), io.BytesIO(data))


def build_oci(out, images, as_dir=False, index_list=False):
    """images: list of (name, layers, compression); index_list: one manifest list of them
    (by architecture: amd64 first, then arm64...) under the first name."""
    blobs = Blobs()
    ms = []
    archs = ["amd64", "arm64", "riscv64", "s390x"]
    for i, (name, layers, comp) in enumerate(images):
        d = oci_image(blobs, layers, comp, arch=archs[i] if index_list else "amd64")
        if index_list:
            d["platform"] = {"os": "linux", "architecture": archs[i]}
        else:
            d["annotations"] = {"org.opencontainers.image.ref.name": name}
        ms.append(d)
    if index_list:
        lst = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                          "manifests": ms}).encode()
        ms = [dict(mediaType="application/vnd.oci.image.index.v1+json", **blobs.add(lst),
                   annotations={"org.opencontainers.image.ref.name": images[0][0]})]
    files = dict(blobs.files)
    files["oci-layout"] = b'{"imageLayoutVersion": "1.0.0"}'
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": ms}).encode()
    write_oci(out, files, as_dir)


def build_docker(out, images):
    """docker save's classic layout: <id>/layer.tar, <config hex>.json, manifest.json."""
    files, manifest = {}, []
    for name, layers, _ in images:
        cfg = config(layers)
        files[sha(cfg) + ".json"] = cfg
        paths = []
        for l in layers:
            p = sha(l) + "/layer.tar"
            files[p] = l
            paths.append(p)
        manifest.append({"Config": sha(cfg) + ".json", "RepoTags": [name], "Layers": paths})
    files["manifest.json"] = json.dumps(manifest).encode()
    write_oci(out, files, False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--format", default="docker", choices=["docker", "oci", "oci-dir"])
    ap.add_argument("--name", default="busybox:test")
    ap.add_argument("--compression", default=None, choices=[None, "gzip", "zstd"])
    ap.add_argument("--sdk", action="store_true", help="add sdk_layer() (tests/sdk/run.sh)")
    a = ap.parse_args()
    imgs = [(a.name, [busybox_layer()] + ([sdk_layer()] if a.sdk else []), a.compression)]
    if a.format == "docker":
        build_docker(a.out, imgs)
    else:
        if a.format == "oci-dir" and os.path.exists(a.out):
            shutil.rmtree(a.out)
        build_oci(a.out, imgs, as_dir=a.format == "oci-dir")


if __name__ == "__main__":
    main()
