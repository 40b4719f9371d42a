"""The Sandbox contract through the methods DeerFlow's tools call (execute_command, read_file,
write_file, update_file, download_file, list_dir, glob, grep), on a DeerFlow Sandbox object:
shared by the drivers (deerflow_aio_driver.py, deerflow_aio_backend_driver.py) that run inside
DeerFlow's Python."""


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
