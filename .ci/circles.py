#!/usr/bin/env python3
"""Import circles inside each crate (docs/architecture.md, "Structure rules").

A file's module imports another's when its code (tests aside) names a path into it:
`use crate::a::b::X`, `super::x::f(...)`, `use child::Y`. A module naming what its own
parent or an ancestor defines is not counted (that is how a room uses its house's shared
vocabulary); every other import between two files of a crate is, and no chain of them may
come back to where it started. Prints each circle found and exits 1 if there is one.
Usage: python3 .ci/circles.py [CRATE_SRC_DIR ...] (default: crates/*/src bins/*/src)."""

import glob
import os
import re
import sys

MOD = re.compile(r'^\s*(?:#\[path\s*=\s*"([^"]+)"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', re.M)
PATH = re.compile(r"\b((?:crate|super|self)(?:::\w+)+|\w+(?:::\w+)+)")
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)


def code_of(path):
    """The file's text before its test module, comments and strings blanked."""
    src = open(path, encoding="utf-8").read()
    src = re.split(r"\n#\[cfg\(test\)\]\s*\nmod ", src)[0]
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)
    return src


def tree(root_file):
    """Module path (tuple) -> file, following `mod x;` (and `#[path]`) from the root."""
    mods = {(): root_file}
    todo = [((), root_file)]
    while todo:
        mpath, f = todo.pop()
        d = os.path.dirname(f)
        base = os.path.basename(f)
        sub = d if base in ("lib.rs", "main.rs", "mod.rs") else os.path.join(d, base[:-3])
        for m in MOD.finditer(code_of(f)):
            explicit, name = m.group(1), m.group(2)
            if explicit:
                child = os.path.join(d, explicit)
            else:
                child = os.path.join(sub, name + ".rs")
                if not os.path.exists(child):
                    child = os.path.join(sub, name, "mod.rs")
            if os.path.exists(child):
                mods[mpath + (name,)] = child
                todo.append((mpath + (name,), child))
    return mods


def expand_use(body):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (enough for imports)."""
    body = " ".join(body.split())
    i = body.find("{")
    if i < 0:
        return [body.split(" as ")[0].strip()]
    pre, inner = body[:i], body[i + 1 : body.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out += expand_use(pre + p.strip())
    return out


def edges(mods):
    by_file = {f: m for m, f in mods.items()}
    out = {}
    for f, me in by_file.items():
        code = code_of(f)
        children = {m[-1] for m in mods if len(m) == len(me) + 1 and m[: len(me)] == me}
        paths = set()
        for u in USE.finditer(code):
            paths.update(expand_use(u.group(1)))
        paths.update(PATH.findall(USE.sub("", code)))
        targets = set()
        for p in paths:
            segs = [s for s in p.split("::") if s]
            if not segs:
                continue
            if segs[0] == "crate":
                cur, rest = (), segs[1:]
            elif segs[0] in ("self", "super"):
                cur, rest = me, segs
                while rest and rest[0] in ("self", "super"):
                    cur = cur[:-1] if rest[0] == "super" else cur
                    rest = rest[1:]
            elif segs[0] in children:
                cur, rest = me, segs
            else:
                continue
            # The deepest module the path reaches.
            for s in rest:
                if cur + (s,) in mods:
                    cur = cur + (s,)
                else:
                    break
            if cur == me or me[: len(cur)] == cur:
                continue  # itself, or an ancestor's shared items
            targets.add(mods[cur])
        out[f] = targets
    return out


def circles(graph):
    """The strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    roots = sys.argv[1:] or sorted(glob.glob("crates/*/src") + glob.glob("bins/*/src"))
    bad = 0
    for src in roots:
        for root in ("lib.rs", "main.rs"):
            f = os.path.join(src, root)
            if not os.path.exists(f):
                continue
            graph = edges(tree(f))
            for comp in circles(graph):
                bad += 1
                print(f"FATAL: an import circle in {src}: " + ", ".join(comp), file=sys.stderr)
                for a in comp:
                    for b in sorted(graph[a] & set(comp)):
                        print(f"  {a} -> {b}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
