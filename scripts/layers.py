#!/usr/bin/env python3
"""Checks the layers: no cycle between the workspace's crates, and none between folders.

Crates: from `cargo metadata`, the normal dependencies between workspace members must form no
cycle, and the bottom layers must not depend on the layers above them (`LAYERS`, bottom up).

Folders: a file depends on another when its code (not its test module, nor a file that is a
test module: `#[cfg(test)] mod tests;`) names an item of that file's module through a
`crate::` or `super::` path, or through a `use` of one. A parent's `mod x;`, `pub use x::...`
and `pub(crate) use x::...` re-exports are not dependencies: they are the parent's facade over
its children. Files are grouped by the folder that holds them
(`x/mod.rs` and `x/y.rs` both belong to `x`); a folder and the folders nested in it are one
part, so a cycle is between folders side by side (siblings or cousins). Inside one folder,
files of one type may refer to each other. Prints each cycle (a strongly connected component
of more than one folder) and exits 1 if there is one.

Usage: scripts/layers.py                      # crates, then the folders of every crate
       scripts/layers.py SRC-DIR [--graph]    # the folders of one source tree
"""
import json
import os
import re
import subprocess
import sys

# The workspace's library crates, bottom up: each may depend only on those before it (the C
# ABI, `capi/`, and the Python package, `python/`, on top; neither depends on the other).
LAYERS = ["rdma-fabric", "rdma-wire", "rdma-pubsub", "rdma-pubsub-c", "rdma-pubsub-python"]
# The source trees whose folders are checked.
SOURCE_TREES = ["fabric/src", "wire/src", "src", "capi/src", "python/src"]


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


def folder_of(module, modules):
    """The folder that holds a module's file: `x` for `x/mod.rs` and for `x/y.rs`."""
    path = modules[module]
    is_facade = os.path.basename(path) in ("mod.rs", "lib.rs")
    return module if is_facade else module[:-1]


def nested(a, b):
    """Whether one folder is inside the other (or they are the same)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def strongly_connected(graph):
    """Tarjan's strongly connected components."""
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

    for v in list(graph):
        if v not in index:
            strong(v)
    return sccs


def test_modules(modules):
    """The modules declared `#[cfg(test)] mod x;` by their parent: files of test code only."""
    out = set()
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod\s+(\w+)\s*;")
    for m, path in modules.items():
        for name in pattern.findall(strip_comments(open(path).read())):
            out.add(m + (name,))
    return out


def folder_cycles(root, show_graph=False):
    """Prints the cycles between the folders of one source tree; returns how many. Files of
    test modules (`#[cfg(test)] mod tests;` and what they contain) are test code, not
    dependencies, as test modules inside a file are."""
    modules = files_of(root)
    reexports = reexports_of(modules)
    tests = test_modules(modules)
    graph = {}
    for m, path in modules.items():
        if any(m[: len(t)] == t for t in tests):
            continue
        here = folder_of(m, modules)
        graph.setdefault(here, set())
        text = strip_comments(strip_tests(open(path).read()))
        for p, reexport in paths_in(text):
            t = resolve(p, m, modules, reexports)
            if t is None or t == m:
                continue
            if reexport and t[: len(m)] == m:
                continue  # a parent's re-export of its child
            there = folder_of(t, modules)
            if not nested(here, there):
                graph[here].add(there)
                graph.setdefault(there, set())
    name = lambda f: root + ("/" + "/".join(f) if f else "")
    if show_graph:
        for f in sorted(graph):
            print(name(f), "->", ", ".join(sorted(name(t) for t in graph[f])))
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    for c in cycles:
        members = set(c)
        print("cycle between folders:", ", ".join(sorted(name(x) for x in c)))
        for x in sorted(c):
            print("   ", name(x), "->", ", ".join(sorted(name(t) for t in graph[x] if t in members)))
    return len(cycles)


def crate_problems():
    """Cycles between the workspace's crates, and dependencies that go up the layers."""
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--no-deps", "--format-version", "1"]))
    members = {p["name"]: p for p in meta["packages"]}
    graph = {n: set() for n in members}
    for n, p in members.items():
        for d in p["dependencies"]:
            if d["name"] in members and d.get("kind") is None:
                graph[n].add(d["name"])
    problems = []
    for c in strongly_connected(graph):
        if len(c) > 1:
            problems.append("cycle between crates: " + ", ".join(sorted(c)))
    for i, low in enumerate(LAYERS):
        for up in LAYERS[i + 1:]:
            if low in graph and up in graph[low]:
                problems.append(f"{low} depends on {up}, a layer above it")
    for n in sorted(graph):
        print("crate", n, "->", ", ".join(sorted(graph[n])) or "(no workspace crate)")
    return problems


def main():
    args = sys.argv[1:]
    if args and not args[0].startswith("--"):
        return 1 if folder_cycles(args[0], "--graph" in args) else 0
    problems = crate_problems()
    for p in problems:
        print(p)
    cycles = sum(folder_cycles(root) for root in SOURCE_TREES)
    if not problems and not cycles:
        print("no cycle between crates or folders; every crate depends only on the layers below it")
    return 1 if problems or cycles else 0


if __name__ == "__main__":
    sys.exit(main())
