#!/usr/bin/env python3
"""Sums ncu's per-kernel gpu__time_duration CSV (scripts/gpu_check.sh, step 6) by kernel name.

Usage: ncu_summary.py FILE.csv [STEPS]
Prints one line per kernel name: launches, total and mean microseconds, share of the total; with STEPS (the
number of training steps the profiled launches cover) also the microseconds per step. ncu's own messages
(lines starting with ==) and anything before the CSV header are skipped.
"""
import csv
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path = sys.argv[1]
    steps = float(sys.argv[2]) if len(sys.argv) == 3 else 0.0
    with open(path, newline="") as f:
        lines = [l for l in f if not l.startswith("==")]
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"ncu_summary: no CSV header (\"ID\",...) in {path}")
    rows = list(csv.DictReader(lines[start:]))
    per = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit)
        if scale is None:
            sys.exit(f"ncu_summary: unknown unit {unit!r} in {path}")
        us = float(r["Metric Value"].replace(",", "")) * scale
        name = r.get("Kernel Name", "?")
        n, t = per.get(name, (0, 0.0))
        per[name] = (n + 1, t + us)
    total = sum(t for _, t in per.values())
    print(f"{path}: {sum(n for n, _ in per.values())} launches, {total:.1f} us of GPU time")
    for name, (n, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        line = f"{n:6d} x {t / n:9.2f} us = {t:10.1f} us ({100 * t / total if total else 0:5.1f} %)"
        if steps > 0:
            line += f" {t / steps:9.2f} us/step"
        print(f"{line}  {name[:100]}")


if __name__ == "__main__":
    main()
