#!/usr/bin/env python3
"""libsbx.so exports exactly the functions include/sbx/*.h declares.

usage: check_exports.py LIBSBX_SO LIBSBX_A INCLUDE_DIR

The declarations come from the compiler itself (gcc -aux-info lists every function prototype a
translation unit sees, with the file and line it came from), one translation unit per public
header, so each header must also compile on its own. The exports come from nm -D. Positive
control: the static archive's global symbols (every internal function among them) must fail the
same comparison, or the check could not catch a leak."""
import glob
import os
import re
import subprocess
import sys
import tempfile

AUX = re.compile(r"^/\* (?P<file>[^:]+):(?P<line>\d+):\w+ \*/ extern .*?(?P<name>\w+) \(")


def declared(include_dir):
    """{name: "header:line"} of every function declared in include_dir/sbx/*.h."""
    out = {}
    headers = sorted(glob.glob(os.path.join(include_dir, "sbx", "*.h")))
    if not headers:
        sys.exit("no public headers under %s/sbx" % include_dir)
    root = os.path.realpath(include_dir)
    with tempfile.TemporaryDirectory() as tmp:
        for h in headers:
            src = os.path.join(tmp, "t.c")
            aux = os.path.join(tmp, "t.aux")
            with open(src, "w") as f:
                f.write("#include <sbx/%s>\n" % os.path.basename(h))
            p = subprocess.run(["gcc", "-std=gnu17", "-Wall", "-Werror", "-I", include_dir,
                                "-fsyntax-only", "-aux-info", aux, src],
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("%s does not compile on its own:\n%s" % (h, p.stderr))
            with open(aux) as f:
                for line in f:
                    m = AUX.match(line)
                    if m and os.path.realpath(m["file"]).startswith(root + os.sep):
                        out[m["name"]] = "%s:%s" % (os.path.relpath(m["file"], include_dir),
                                                    m["line"])
    return out


def symbols(cmd):
    """Names of the defined global symbols nm reports."""
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    names = set()
    for line in p.stdout.splitlines():
        parts = line.split()
        # "ADDR TYPE NAME"; archive member headers ("x.o:") and blank lines are skipped
        if len(parts) == 3 and parts[1] not in ("U", "w", "v"):
            names.add(parts[2].split("@")[0])
    return names


def compare(exported, decl):
    problems = []
    for name in sorted(exported - set(decl)):
        problems.append("exported but not declared in a public header: %s" % name)
    for name in sorted(set(decl) - exported):
        problems.append("declared at %s but not exported: %s" % (decl[name], name))
    return problems


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[2])
    so, archive, include_dir = sys.argv[1:]
    decl = declared(include_dir)
    if len(decl) < 10:
        sys.exit("only %d declarations found in %s: the parser is broken" % (len(decl), include_dir))
    internal = symbols(["nm", "-g", "--defined-only", archive])
    if not compare(internal, decl):
        sys.exit("positive control failed: %s's globals pass the check" % archive)
    problems = compare(symbols(["nm", "-D", "--defined-only", so]), decl)
    for p in problems:
        print(p)
    if problems:
        sys.exit("%s: %d problem(s)" % (so, len(problems)))
    print("%s exports the %d functions include/sbx declares, nothing else" % (so, len(decl)))


if __name__ == "__main__":
    main()
