#!/usr/bin/env python3
"""File-level dependency graph of src/: who includes whom, and who calls whom.

A module is a .c file and the .h of the same name beside it (x.c + x.h = x). `a` depends on `b`
when a.c or a.h includes b.h, or when a.c's object calls a function or uses a variable that b.c's
object defines (read with nm from the build folder, so a catch-all header that declares
everybody's functions cannot hide a cycle). Prints every cycle and exits 1 when there is one;
`--edges` prints one `a -> b` a line, `--dot` the graph for Graphviz.

  scripts/deps.py [BUILD]          # exit 0: the graph is a DAG (BUILD defaults to build/)
  scripts/deps.py --edges [BUILD]  # what depends on what
"""
import subprocess
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(TOP, "src")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files():
    for top, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.join(top, f)


def module_of(path):
    return os.path.relpath(os.path.splitext(path)[0], TOP)


def resolve(name, including, by_base):
    beside = os.path.normpath(os.path.join(os.path.dirname(including), name))
    if os.path.exists(beside):
        return beside
    for cand in (os.path.join(SRC, name), os.path.join(TOP, "include", name)):
        if os.path.exists(cand):
            return cand
    hits = by_base.get(os.path.basename(name), [])
    return hits[0] if len(hits) == 1 else None


def graph():
    files = list(source_files())
    by_base = {}
    for f in files:
        by_base.setdefault(os.path.basename(f), []).append(f)
    edges = {}
    for f in files:
        a = module_of(f)
        edges.setdefault(a, set())
        with open(f, encoding="utf-8", errors="replace") as fh:
            for name in INCLUDE_RE.findall(fh.read()):
                target = resolve(name, f, by_base)
                if target is None or not target.startswith(SRC):
                    continue  # generated headers and public include/ are leaves
                b = module_of(target)
                if b != a:
                    edges[a].add(b)
    return edges


def object_edges(build, edges):
    """Add an edge for every symbol one object uses and another defines (nm -P)."""
    defined, used = {}, {}
    for top, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            obj = os.path.join(top, f)
            m = re.search(r"\.dir/(.*)\.c\.o$", obj)
            if not m or "CMakeFiles" not in obj:
                continue
            mod = os.path.join("src", m.group(1))
            if not os.path.exists(os.path.join(TOP, mod + ".c")):
                continue
            out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                sym, kind = parts[0], parts[1]
                if kind == "U":
                    used.setdefault(mod, set()).add(sym)
                elif kind in "TDBR":
                    defined.setdefault(sym, set()).add(mod)
    for mod, syms in used.items():
        edges.setdefault(mod, set())
        for sym in syms:
            owners = defined.get(sym, set())
            if len(owners) == 1:
                (b,) = owners
                if b != mod:
                    edges[mod].add(b)


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    edges = graph()
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = args[0] if args else os.path.join(TOP, "build")
    if os.path.isdir(build):
        object_edges(build, edges)
    else:
        print("note: no build folder `%s`: include edges only" % build, file=sys.stderr)
    if "--dot" in sys.argv:
        print("digraph sbx {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print('  "%s" -> "%s";' % (a, b))
        print("}")
    elif "--edges" in sys.argv:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print("%s -> %s" % (a, b))
    found = cycles(edges)
    for comp in found:
        print("cycle: " + " <-> ".join(comp), file=sys.stderr)
    if not found and "--edges" not in sys.argv and "--dot" not in sys.argv:
        print("no dependency cycle among %d modules" % len(edges))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
