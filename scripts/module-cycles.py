#!/usr/bin/env python3
"""Fails, listing them, if the modules of a crate import each other in a cycle.

`scripts/module-cycles.py [CRATE_SRC]` (default host/src) reads every .rs file under CRATE_SRC, takes
its references to other modules of the crate (`crate::x`, `$crate::x`, `super::x` where that leaves
the module, grouped `use crate::{x, y::z}`, and the crate root's re-exports such as `crate::Result`),
ignoring comments and `#[cfg(test)]` blocks, and builds the graph of the top-level modules (a
directory module such as engine/ is one node). Each strongly connected component of more than one
module is a cycle: modules that cannot be understood, tested or moved one without the other.
"""
import re
import sys
from pathlib import Path


def strip_comments_and_strings(text):
    """The code without comments, and with string and char literals emptied (their braces and
    `crate::` words are not code)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12]):
            end = text.find("'", i + 2)
            out.append("' '")
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_test_blocks(code):
    """The code without the items marked `#[cfg(test)]` (test modules and test helpers)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        j = m.end()
        # The item runs to the end of its braces, or to its `;` for `mod tests;` and `use` lines.
        brace, semi = code.find("{", j), code.find(";", j)
        if semi >= 0 and (brace < 0 or semi < brace):
            i = semi + 1
            continue
        depth, k = 0, brace
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    out.append(code[i:])
    return "".join(out)


def paths_after(code, prefix):
    """Every path that follows `prefix` (`crate::`), grouped imports expanded to their first names."""
    found = []
    for m in re.finditer(re.escape(prefix), code):
        rest = code[m.end():]
        if rest.startswith("{"):
            depth, k = 0, 0
            while k < len(rest):
                depth += {"{": 1, "}": -1}.get(rest[k], 0)
                if depth == 0:
                    break
                k += 1
            for item in split_top(rest[1:k]):
                name = re.match(r"\s*(\w+)", item)
                if name:
                    found.append(name.group(1))
        else:
            name = re.match(r"(\w+)", rest)
            if name:
                found.append(name.group(1))
    return found


def split_top(group):
    parts, depth, cur = [], 0, []
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def main():
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "host/src")
    root = src / "lib.rs"
    nodes = sorted(
        p.stem if p.is_file() else p.name
        for p in src.iterdir()
        if (p.suffix == ".rs" and p.name != "lib.rs") or (p.is_dir() and (p / "mod.rs").exists())
    )
    # The root's re-exports: `crate::Result` is error's.
    reexport = {}
    root_code = strip_comments_and_strings(root.read_text())
    for m in re.finditer(r"pub use (\w+)::([^;]+);", root_code):
        module, names = m.group(1), m.group(2)
        if module in nodes:
            for name in re.findall(r"\w+", names):
                reexport.setdefault(name, module)
    edges = {n: set() for n in nodes}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if rel.name == "lib.rs" and len(rel.parts) == 1:
            continue
        node = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        code = strip_test_blocks(strip_comments_and_strings(path.read_text()))
        # `super::` from a top-level file, or `super::super::` from one level down, is the root.
        depth = len(rel.parts) - (1 if rel.name == "mod.rs" else 0)
        names = paths_after(code, "crate::")
        names += paths_after(code, "super::" * depth) if depth else []
        for name in names:
            target = name if name in nodes else reexport.get(name)
            if target and target != node:
                edges[node].add(target)
    cycles = components(nodes, edges)
    if not cycles:
        print(f"{src}: {len(nodes)} modules, no import cycle")
        return 0
    print(f"{src}: modules that import each other in a cycle:")
    for comp in cycles:
        print("  " + ", ".join(sorted(comp)))
        for a in sorted(comp):
            inside = sorted(b for b in edges[a] if b in comp)
            print(f"    {a} -> {', '.join(inside)}")
    print("Break each cycle: move what both sides need into a module below them both.")
    return 1


def components(nodes, edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
