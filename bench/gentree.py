#!/usr/bin/python3
"""Generates the search benchmark's tree: FILES files, most of them under node_modules/.

    gentree.py DIR FILES

Layout (deterministic, seeded):
  DIR/src/pkgNN/modMM/fileK.{py,js,ts,md}   25 % of the files: the project itself
  DIR/node_modules/<pkg>/lib/<sub>/fileK.js 72 %: an ignored dependency tree
  DIR/.git/objects/xx/<hash>                 3 %: ignored too
Needles (what the benchmark searches for):
  - NEEDLE_7f3a occurs in 3 project files and in 500 node_modules files (a rare grep whose
    capped raw output gets eaten by node_modules in the seeds' remote approach);
  - *.rs: 5 project files and 300 node_modules files (a rare glob: the walk must finish);
  - *.py and `import` are common (the capped result fills early).
A stamp file DIR/.gentree records the parameters; an existing tree with the same stamp is kept.
"""
import os
import random
import sys

VERSION = 2


def main():
    root, total = sys.argv[1], int(sys.argv[2])
    stamp = os.path.join(root, ".gentree")
    want = f"v{VERSION} files={total}\n"
    try:
        with open(stamp) as f:
            if f.read() == want:
                return 0
    except OSError:
        pass
    if os.path.exists(root):
        os.system(f"rm -rf -- '{root}'")
    rng = random.Random(42)
    n_src = total * 25 // 100
    n_git = total * 3 // 100
    n_nm = total - n_src - n_git
    words = ("value config handler request result buffer parser token stream index cache "
             "client server module export return const async await update render").split()

    def body(lines, lang):
        out = []
        for i in range(lines):
            w = rng.sample(words, 3)
            if lang == "py":
                out.append(f"def {w[0]}_{i}({w[1]}): return {w[2]}  # {rng.randrange(10**6)}")
            elif lang == "md":
                out.append(f"The {w[0]} of the {w[1]} is {w[2]} ({rng.randrange(10**6)}).")
            else:
                out.append(f"export const {w[0]}{i} = ({w[1]}) => {w[2]}; // {rng.randrange(10**6)}")
        return out

    def write(path, lines):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, ("\n".join(lines) + "\n").encode())
        os.close(fd)

    # project files
    exts = ["py", "js", "ts", "md"]
    made = 0
    rs_left, needle_left = 5, 3
    pkg = 0
    while made < n_src:
        for mod in range(10):
            d = os.path.join(root, "src", f"pkg{pkg:02d}", f"mod{mod:02d}")
            os.makedirs(d, exist_ok=True)
            for k in range(20):
                if made >= n_src:
                    break
                ext = exts[(made + k) % 4]
                if rs_left and made % 997 == 500:
                    ext, rs_left = "rs", rs_left - 1
                lines = (["import os", "import sys"] if ext == "py" else
                         ["import { x } from './x';"]) + body(rng.randrange(8, 16), ext)
                if needle_left and made % 1499 == 700:
                    lines.insert(3, "// NEEDLE_7f3a: the line the agent is looking for")
                    needle_left -= 1
                write(os.path.join(d, f"file{k:02d}.{ext}"), lines)
                made += 1
        pkg += 1
    # node_modules
    made = 0
    rs_every = max(1, n_nm // 300)
    needle_every = max(1, n_nm // 500)
    p = 0
    while made < n_nm:
        for sub in range(5):
            d = os.path.join(root, "node_modules", f"dep-{p:04d}", "lib", f"part{sub}")
            os.makedirs(d, exist_ok=True)
            for k in range(20):
                if made >= n_nm:
                    break
                ext = "rs" if made % rs_every == 0 else "js"
                lines = ["import { y } from '../y';"] + body(rng.randrange(8, 16), "js")
                if made % needle_every == 1:
                    lines.insert(2, "// NEEDLE_7f3a in a dependency")
                write(os.path.join(d, f"file{k:02d}.{ext}"), lines)
                made += 1
        p += 1
    # .git objects
    for i in range(n_git):
        d = os.path.join(root, ".git", "objects", f"{i % 256:02x}")
        os.makedirs(d, exist_ok=True)
        write(os.path.join(d, f"{rng.getrandbits(152):038x}"), ["blob"] + body(4, "md"))
    with open(stamp, "w") as f:
        f.write(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
