#!/usr/bin/env python3
"""Resource report of Volt's hand-written CUDA kernels, from ptxas's own figures.

A CUDA-enabled build compiles every .cu file with -Xptxas=-v through scripts/cuda_ptxas_log.sh, which keeps
ptxas's report beside each object as <object>.ptxas.txt. This script reads those files under a build directory
and prints, per kernel instantiation and architecture: registers per thread, static shared memory, stack frame
and spill stores/loads.

Usage: scripts/kernel_resources.py BUILD_DIR [--sources DIR] [--csv FILE] [--summary]
Exit status: 0 when every kernel was found and none spills; 1 on a spill, on a __global__ kernel of the sources
(default: kernels/cuda beside this script) that the report does not list, or when there is no report at all.
"""
import argparse
import csv
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+[a-z]?)'")
PROPS_FOR = re.compile(r"Function properties for (\S+)")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
LAUNCH_BOUNDS = r"(?:__launch_bounds__\([^)]*\)\s*)?"
GLOBAL = re.compile(r"__global__\s+" + LAUNCH_BOUNDS + r"void\s+" + LAUNCH_BOUNDS + r"(\w+)\s*\(")


def demangle(names):
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def parse_report(path):
    """Kernel records of one ptxas report: dicts with mangled name, arch, regs, smem, stack, spills."""
    records, cur, props = [], None, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                cur = {"mangled": m.group(1), "arch": m.group(2), "registers": 0, "smem": 0, "stack": 0,
                       "spill_stores": 0, "spill_loads": 0, "object": os.path.basename(path)[: -len(".ptxas.txt")]}
                records.append(cur)
                props = None
                continue
            if cur is None:
                continue
            m = PROPS_FOR.search(line)
            if m:
                # ptxas also reports non-inlined __device__ functions; their figures belong to no kernel.
                props = cur if m.group(1) == cur["mangled"] else None
                continue
            m = PROPS.search(line)
            if m:
                if props is not None:
                    props["stack"], props["spill_stores"], props["spill_loads"] = (int(g) for g in m.groups())
                continue
            m = USED.search(line)
            if m:
                cur["registers"] = int(m.group(1))
                s = SMEM.search(line)
                cur["smem"] = int(s.group(1)) if s else 0
    return records


def kernel_base(demangled):
    """'void volt::cuda::(anonymous namespace)::map1_kernel<float, ...>(...)' -> 'map1_kernel'."""
    text = demangled.replace("(anonymous namespace)", "anon")
    depth, head = 0, text
    for i, c in enumerate(text):  # the qualified name ends at the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            head = text[:i]
            break
    depth, name = 0, ""
    for c in head:  # drop template argument lists
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            name += c
    parts = name.split("::")[-1].split()
    return parts[-1] if parts else demangled


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("--sources", default=os.path.join(here, "..", "kernels", "cuda"),
                    help="directory whose __global__ kernels must all appear in the report")
    ap.add_argument("--csv", help="also write every record to this CSV file")
    ap.add_argument("--summary", action="store_true", help="one line per kernel (worst case over instantiations)")
    args = ap.parse_args()

    if not os.path.isdir(args.sources):
        print(f"kernel_resources: --sources {args.sources} is not a directory", file=sys.stderr)
        return 1
    reports = []
    for root, _, files in os.walk(args.build_dir):
        reports += [os.path.join(root, f) for f in files if f.endswith(".ptxas.txt")]
    if not reports:
        print(f"kernel_resources: no ptxas reports (*.ptxas.txt) under {args.build_dir}: is it a CUDA-enabled build "
              "configured with scripts/cuda_ptxas_log.sh as the CUDA compiler launcher?", file=sys.stderr)
        return 1
    records = [r for p in sorted(reports) for r in parse_report(p)]
    names = demangle(sorted({r["mangled"] for r in records}))
    for r in records:
        r["kernel"] = names.get(r["mangled"], r["mangled"])
        r["base"] = kernel_base(r["kernel"])

    status = 0
    if args.summary:
        worst = {}
        for r in records:
            w = worst.setdefault((r["base"], r["arch"]), dict(r, count=0))
            w["count"] += 1
            for k in ("registers", "smem", "stack", "spill_stores", "spill_loads"):
                w[k] = max(w[k], r[k])
        print(f"{'kernel':<28} {'arch':<7} {'inst':>5} {'regs':>5} {'smem B':>7} {'stack B':>8} {'spill st':>9} "
              f"{'spill ld':>9}")
        for (base, arch), w in sorted(worst.items()):
            print(f"{base:<28} {arch:<7} {w['count']:>5} {w['registers']:>5} {w['smem']:>7} {w['stack']:>8} "
                  f"{w['spill_stores']:>9} {w['spill_loads']:>9}")
    else:
        print(f"{'regs':>5} {'smem B':>7} {'stack B':>8} {'spill st':>9} {'spill ld':>9}  {'arch':<7} kernel")
        for r in sorted(records, key=lambda r: (r["base"], r["kernel"], r["arch"])):
            print(f"{r['registers']:>5} {r['smem']:>7} {r['stack']:>8} {r['spill_stores']:>9} {r['spill_loads']:>9}  "
                  f"{r['arch']:<7} {r['kernel']}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["kernel", "arch", "registers", "smem", "stack", "spill_stores",
                                              "spill_loads", "object", "mangled"], extrasaction="ignore",
                               lineterminator="\n")
            w.writeheader()
            w.writerows(records)

    spills = [r for r in records if r["spill_stores"] or r["spill_loads"]]
    kernels = {r["base"] for r in records}
    print(f"\n{len(records)} kernel instantiations ({len(kernels)} kernels) in {len(reports)} objects; "
          f"{len(spills)} spill")
    for r in spills:
        print(f"SPILL: {r['kernel']} ({r['arch']}): {r['spill_stores']} bytes spill stores, "
              f"{r['spill_loads']} bytes spill loads, {r['registers']} registers", file=sys.stderr)
        status = 1
    declared = set()
    for root, _, files in os.walk(args.sources):
        for f in files:
            if f.endswith((".cu", ".cuh")):
                with open(os.path.join(root, f), encoding="utf-8") as src:
                    declared |= set(GLOBAL.findall(src.read()))
    missing = sorted(declared - kernels)
    for k in missing:
        print(f"MISSING: __global__ {k} (declared under {args.sources}) has no entry in the ptxas reports",
              file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
