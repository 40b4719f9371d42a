"""Escapes through an image (docs/images.md): an image is attacker input twice, as layers to
unpack (tests/integration/test_images.py::test_hostile_layers) and as the root a sandbox is
built on. Here: an image whose mount points and /etc files are symlinks to host paths, and a
sandbox's root writing over the shared layers. Each attempt must leave the host untouched; the
positive control is the same image without the symlinks."""
import os
import sys

from sbxsec import SOURCE

sys.path.insert(0, os.path.join(SOURCE, "tests", "images"))
import mkimage  # noqa: E402


def _exec(sbx, thread, image, command):
    p = sbx.run("exec", "-t", thread, "--image", image, "--", command)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_symlinked_mount_points_stay_inside(sbx, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host\n")
    bb = mkimage.busybox_layer()
    control = str(tmp_path / "control.tar")
    mkimage.build_docker(control, [("control:1", [bb], None)])
    sbx.ok("image", "import", control)
    rc, out, err = _exec(sbx, "c", "control:1", "echo ok > /tmp/x && cat /tmp/x")
    assert rc == 0 and out == "ok\n", err

    evil = mkimage.layer([(name, ("link", str(outside)))
                          for name in ("proc", "dev", "sys", "tmp", "run", "mnt", "root")] +
                         [("etc/hosts", ("link", str(outside / "hosts"))),
                          ("etc/hostname", ("link", str(outside / "keep"))),
                          ("etc/resolv.conf", ("link", str(outside / "resolv"))),
                          ("etc/passwd", ("link", str(outside / "keep")))])
    img = str(tmp_path / "evil.tar")
    mkimage.build_docker(img, [("evil:1", [bb, evil], None)])
    sbx.ok("image", "import", img)
    rc, out, err = _exec(sbx, "e", "evil:1",
                         "echo pwn > /tmp/x; echo pwn > /root/x; echo pwn > /run/x; "
                         "cat /etc/hostname; grep -c ^root: /etc/passwd; test -d /proc/self && echo proc")
    assert rc == 0, err
    assert out.split("\n")[1:3] == ["1", "proc"], out
    assert sorted(os.listdir(outside)) == ["keep"]
    assert (outside / "keep").read_text() == "host\n"


def test_root_inside_cannot_change_the_shared_layers(sbx, tmp_path):
    img = str(tmp_path / "bb.tar")
    mkimage.build_docker(img, [("bb:1", [mkimage.busybox_layer()], None)])
    sbx.ok("image", "import", img)
    layers = os.path.join(sbx.home, "images", "layers")
    (lid,) = os.listdir(layers)
    before = open(os.path.join(layers, lid, "etc", "passwd"), "rb").read()
    rc, out, err = _exec(sbx, "w", "bb:1",
                         "echo pwn >> /etc/passwd; rm -f /bin/sh.busybox /bin/ls; chmod 777 /bin; "
                         "echo pwn > /bin/busybox 2>/dev/null; mount -o remount,rw / 2>&1; true")
    assert open(os.path.join(layers, lid, "etc", "passwd"), "rb").read() == before
    assert os.path.exists(os.path.join(layers, lid, "bin", "ls"))
    assert os.stat(os.path.join(layers, lid, "bin")).st_mode & 0o777 == 0o755
    assert os.path.getsize(os.path.join(layers, lid, "bin", "busybox")) > 100000
    # another sandbox of the image sees the image, not the first one's changes
    rc, out, err = _exec(sbx, "other", "bb:1", "grep -c pwn /etc/passwd; test -e /bin/ls; echo $?")
    assert out == "0\n0\n", (out, err)
