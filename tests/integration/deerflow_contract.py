"""The Sandbox contract through the methods DeerFlow's tools call (execute_command, read_file,
write_file, update_file, download_file, list_dir, glob, grep), on a DeerFlow Sandbox object:
shared by the drivers (deerflow_aio_driver.py, deerflow_aio_backend_driver.py) that run inside
DeerFlow's Python; and the config.yaml they point DeerFlow at."""
import os
import tempfile

_config_dir = None


def write_config(url, key, **sandbox):
    """DeerFlow's config.yaml with the AIO provider in provisioner mode at url (the one line that
    matters is provisioner_url: docs/deerflow.md), and more sandbox keys; DEER_FLOW_CONFIG_PATH
    names it. Written again in place: DeerFlow reloads a changed file on the next read."""
    global _config_dir
    _config_dir = _config_dir or tempfile.mkdtemp(prefix="sbx-deerflow-")
    lines = ["sandbox:", "  use: deerflow.community.aio_sandbox:AioSandboxProvider",
             "  provisioner_url: %s" % url, "  provisioner_api_key: %s" % key]
    for k, v in sandbox.items():
        if isinstance(v, dict):
            lines.append("  %s:" % k)
            lines += ["    %s: %s" % kv for kv in v.items()]
        else:
            lines.append("  %s: %s" % (k, v))
    path = os.path.join(_config_dir, "config.yaml")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    os.environ["DEER_FLOW_CONFIG_PATH"] = path
    return path


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what, flush=True)


def contract(sb):
    sb.write_file("/mnt/user-data/workspace/notes.txt", "alpha\nbeta\ngamma\n")
    check(sb.read_file("/mnt/user-data/workspace/notes.txt") == "alpha\nbeta\ngamma\n", "write_file/read_file")
    check(sb.read_file("/mnt/user-data/workspace/notes.txt", start_line=2, end_line=2) == "beta", "read_file lines")
    sb.write_file("/mnt/user-data/workspace/notes.txt", "delta\n", append=True)
    check(sb.read_file("/mnt/user-data/workspace/notes.txt").endswith("gamma\ndelta\n"), "write_file append")
    blob = bytes(range(256)) * 16
    sb.update_file("/mnt/user-data/outputs/blob.bin", blob)
    check(sb.download_file("/mnt/user-data/outputs/blob.bin") == blob, "update_file/download_file (binary)")
    check(sb.execute_command("echo $S", env={"S": "secret"}).strip() == "secret", "execute_command env (bash.exec)")
    check("secret" not in sb.execute_command("env"), "env does not persist")
    sb.execute_command("mkdir -p /mnt/user-data/workspace/app/node_modules/lib /mnt/user-data/workspace/app/src && "
                       "cd /mnt/user-data/workspace/app && "
                       "for i in $(seq 1200); do echo 'needle' > node_modules/lib/n$i.js; done && "
                       "for i in $(seq 5); do echo 'needle here' > src/f$i.py; done")
    listing = sb.list_dir("/mnt/user-data/workspace/app", max_depth=1)
    check(any(x.endswith("/src") for x in listing), "list_dir")
    files, truncated = sb.glob("/mnt/user-data/workspace/app", "**/*.py")
    check(len(files) == 5 and not truncated, "glob **/*.py (node_modules ignored)")
    matches, truncated = sb.grep("/mnt/user-data/workspace/app", "needle")
    check(len([m for m in matches if "/src/" in m.path]) == 5 and not truncated,
          "grep with 1,200 files in node_modules")
    check(sb.read_file("/mnt/user-data/workspace/none.txt").startswith("Error"), "read_file of a missing file")
