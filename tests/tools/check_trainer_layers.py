#!/usr/bin/env python3
"""The include graph of trainer/, one node per component (a header and its .cpp share a stem; a .cpp whose stem
has no header is its own node). Fails when the graph has a cycle other than the documented ones, and prints each
component's level (0 = includes no other trainer component) so the picture in docs/design.md can be checked.

The one deliberate loop: the training module and its Trainer. A TrainModule reads its trainer's state and logs
into it (train_module.cpp includes trainer.h), and trainer.h holds the module it fits; ManualOptimizer is the
module's handle on the Trainer's optimizer step (TrainModule::optimizers()), so it sits on the module's side. Usage: check_trainer_layers.py [repository root] [--levels]"""
import os
import re
import sys

ALLOWED_LOOPS = [{"trainer", "train_module", "manual_optimizer"}]


def components(root):
    comps = {}
    base = os.path.join(root, "trainer")
    for d, _, files in os.walk(base):
        for f in files:
            if f.endswith((".h", ".cpp", ".cu")):
                rel = os.path.relpath(os.path.join(d, f), base)
                comps.setdefault(os.path.splitext(rel)[0], []).append(rel)
    return base, comps


def graph(root):
    base, comps = components(root)
    inc = re.compile(r'^\s*#\s*include\s*<volt/trainer/([^>]+)\.h>', re.M)
    edges = {c: set() for c in comps}
    for c, files in comps.items():
        for f in files:
            with open(os.path.join(base, f), encoding="utf-8") as fh:
                for m in inc.finditer(fh.read()):
                    dep = m.group(1)
                    if dep != c and dep in comps:
                        edges[c].add(dep)
    return edges


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    edges = graph(root)
    loops = [c for c in sccs(edges) if len(c) > 1]
    bad = [c for c in loops if c not in ALLOWED_LOOPS]
    # Levels over the graph with each allowed loop collapsed to one node.
    rep = {}
    for c in loops:
        for v in c:
            rep[v] = min(c)
    level = {}

    def lvl(v, seen=()):
        r = rep.get(v, v)
        if r in level:
            return level[r]
        members = [u for u in edges if rep.get(u, u) == r]
        deps = {rep.get(w, w) for u in members for w in edges[u]} - {r}
        if r in seen:
            return 0
        level[r] = 1 + max((lvl(d, seen + (r,)) for d in deps), default=-1)
        return level[r]

    for v in edges:
        lvl(v)
    if "--levels" in sys.argv:
        for v in sorted(edges, key=lambda v: (level[rep.get(v, v)], v)):
            print(f"{level[rep.get(v, v)]:2d}  {v}  -> {', '.join(sorted(edges[v])) or '-'}")
    for c in bad:
        print("check_trainer_layers: include loop between " + ", ".join(sorted(c)), file=sys.stderr)
        for v in sorted(c):
            print(f"  {v} includes {', '.join(sorted(w for w in edges[v] if w in c))}", file=sys.stderr)
    if bad:
        return 1
    print(f"check_trainer_layers: {len(edges)} components on {1 + max(level.values())} levels; "
          f"the only loop is module <-> trainer ({', '.join(sorted(ALLOWED_LOOPS[0]))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
