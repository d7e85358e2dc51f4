#!/usr/bin/env python3
"""Where one training step's GPU time goes, from the "ops" profiler's Chrome trace (<profiler-dir>/fit-trace.json,
gzipped or not): the kernels between two consecutive launches of a marker kernel that runs once per step
(default classifier_fwd, GPT-2's fused classifier), summed by kernel name.

Usage: trace_step_kernels.py TRACE [--marker NAME] [--period K]
Period K (default: the second to last) is the span from the marker's K-th launch to the next one (steady state,
not the first step). Prints the period, the GPU-busy time in it, and per kernel: launches, total ms, share, and
the largest single launches in µs."""
import argparse
import collections
import gzip
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--marker", default="classifier_fwd")
    ap.add_argument("--period", type=int, default=-2)
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu_tids = {e["tid"] for e in events if e.get("ph") == "M" and "kernels" in str(e.get("args", {}).get("name"))}
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("tid") in gpu_tids), key=lambda e: e["ts"])
    marks = [e["ts"] for e in kernels if e["name"] == a.marker]
    if len(marks) < 3:
        sys.exit(f"trace_step_kernels: {len(marks)} launches of {a.marker}; need 3 or more (several steps)")
    k = a.period if a.period >= 0 else len(marks) - 1 + a.period
    if not 0 <= k < len(marks) - 1:
        sys.exit(f"trace_step_kernels: period {a.period} out of range (0..{len(marks) - 2})")
    t0, t1 = marks[k], marks[k + 1]
    by = collections.defaultdict(list)
    for e in kernels:
        if t0 <= e["ts"] < t1:
            by[e["name"]].append(e["dur"])
    busy = sum(sum(v) for v in by.values())
    print(f"period {k}: {(t1 - t0) / 1000:.2f} ms between launches of {a.marker}; GPU busy {busy / 1000:.2f} ms in "
          f"{sum(len(v) for v in by.values())} kernels")
    print(f"{'kernel':24s} {'launches':>8s} {'ms':>8s} {'share':>6s}  largest launches (µs)")
    for name, d in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        top = ", ".join(f"{x:.0f}" for x in sorted(d)[-3:][::-1])
        print(f"{name:24s} {len(d):8d} {sum(d) / 1000:8.3f} {sum(d) / busy:6.1%}  {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
