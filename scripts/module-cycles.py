#!/usr/bin/env python3
"""Finds import cycles between the library's source files.

A file depends on another when its code (not its test module) names an item of that file's
module through a `crate::` or `super::` path, or through a `use` of one. A parent's `mod x;`,
`pub use x::...` and `pub(crate) use x::...` re-exports are not dependencies: they are the
parent's facade over its children. Prints each cycle (as a strongly connected component of
more than one file) and exits 1 if there is one.

Usage: scripts/module-cycles.py [src-dir] [--under PREFIX] [--graph]
"""
import os
import re
import sys


def module_of(path, root):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


def files_of(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(d, n)
                out[module_of(p, root)] = p
    return out


def strip_tests(text):
    # Drop `#[cfg(test)] mod x { ... }` blocks and `#[cfg(test)] mod x;` lines.
    out, i = [], 0
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*(\{|;)")
    while True:
        m = pattern.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        if m.group(3) == ";":
            i = m.end()
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    return "".join(out)


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def paths_in(text):
    """Every path the code names: `crate::a::b`, `super::a`, and the expansions of use trees."""
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        found.extend(expand(m.group(1).replace("\n", " "), m.start(), text))
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::\w+)+)", text):
        if text[max(0, m.start() - 4):m.start()] != "use ":
            found.append((m.group(1), False))
    return found


def expand(tree, at, text):
    tree = re.sub(r"\s+as\s+\w+", "", tree)  # `x as y` names x
    tree = re.sub(r"\s+", "", tree)
    line_start = text.rfind("\n", 0, at) + 1
    prefix = text[line_start:at]
    reexport = bool(re.search(r"pub(\([\w:]+\))?\s*$", prefix))
    results = []

    def walk(prefix, t):
        if "{" in t and t.endswith("}"):
            head, body = t.split("{", 1)
            body = body[:-1]
            parts, depth, cur = [], 0, ""
            for ch in body:
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += {"{": 1, "}": -1}.get(ch, 0)
                cur += ch
            parts.append(cur)
            for p in parts:
                if p:
                    walk(prefix + head, p)
        else:
            results.append((prefix + t, reexport))

    walk("", tree)
    return results


def resolve(path, here, modules, reexports=None):
    parts = path.split("::")
    if parts[0] == "crate":
        base, parts = (), parts[1:]
    elif parts[0] == "super":
        base = here
        while parts and parts[0] == "super":
            base, parts = base[:-1], parts[1:]
    elif parts[0] == "self":
        base, parts = here, parts[1:]
    elif here + (parts[0],) in modules:
        base = here  # a child module, named from its parent
    else:
        return None
    target = base
    for i, p in enumerate(parts):
        if target + (p,) in modules:
            target = target + (p,)
            continue
        # An item: follow the module's re-exports of it to where it is defined.
        if reexports:
            target = defining_module(p, target, reexports, set())
        break
    return target


def defining_module(name, module, reexports, seen):
    """Where `name`, named through `module`, is defined: followed through named and glob
    re-exports (`pub use x::Name`, `pub use x::*`)."""
    if (module, name) in seen:
        return module
    seen.add((module, name))
    named = reexports.get(module, {})
    if name != "*" and name in named:
        return defining_module(name, named[name], reexports, seen)
    for glob in named.get("*", []):
        if defines(glob, name) or name in reexports.get(glob, {}):
            return defining_module(name, glob, reexports, seen)
    return module


DEFINITIONS = {}


def defines(module, name):
    text = DEFINITIONS.get(module, "")
    return re.search(r"\b(?:struct|enum|fn|type|const|static|trait|union|macro_rules!)\s+" + re.escape(name) + r"\b", text) is not None


def reexports_of(modules):
    """Per module: the names it re-exports (`pub use`, `pub(crate) use`) and the module each
    comes from."""
    out = {}
    for m, path in modules.items():
        text = strip_comments(strip_tests(open(path).read()))
        DEFINITIONS[m] = text
        names = {"*": []}
        for u in re.finditer(r"\bpub(?:\([\w:]+\))?\s+use\s+([^;]+);", text):
            for p, _ in expand(u.group(1).replace("\n", " "), u.start(), text):
                last = p.split("::")[-1]
                if last == "*":
                    t = resolve("::".join(p.split("::")[:-1]), m, modules)
                    if t is not None and t != m:
                        names["*"].append(t)
                    continue
                if last == "self":
                    continue
                t = resolve("::".join(p.split("::")[:-1]) or "self", m, modules)
                if t is not None and t != m:
                    names[last] = t
        out[m] = names
    return out


def main():
    args = sys.argv[1:]
    root = args[0] if args and not args[0].startswith("--") else "src"
    under = ()
    if "--under" in args:
        under = tuple(args[args.index("--under") + 1].split("/"))
    modules = files_of(root)
    graph = {m: set() for m in modules}
    reexports = reexports_of(modules)
    for m, path in modules.items():
        text = strip_comments(strip_tests(open(path).read()))
        for p, reexport in paths_in(text):
            t = resolve(p, m, modules, reexports)
            if t is None or t == m:
                continue
            if reexport and t[: len(m)] == m:
                continue  # a parent's re-export of its child
            graph[m].add(t)
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
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
            sccs.append(comp)

    for v in graph:
        if v not in index:
            strong(v)
    name = lambda m: "/".join(m) or "lib"
    if "--graph" in args:
        for m in sorted(graph):
            if m[: len(under)] == under:
                print(name(m), "->", ", ".join(sorted(name(t) for t in graph[m])))
    cycles = [c for c in sccs if len(c) > 1 and any(x[: len(under)] == under for x in c)]
    for c in cycles:
        members = set(c)
        print("cycle:", ", ".join(sorted(name(x) for x in c)))
        for x in sorted(c):
            print("   ", name(x), "->", ", ".join(sorted(name(t) for t in graph[x] if t in members)))
    if not cycles:
        print("no import cycles" + (f" under {name(under)}" if under else ""))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
