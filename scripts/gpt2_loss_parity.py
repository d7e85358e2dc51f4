#!/usr/bin/env python3
"""Compares the per-step losses of two GPT-2 runs from the same initial weights and token stream: the PyTorch
reference's JSON line (../shared/anchors/gpt2_torch.py --losses) and Volt's (benchmarks/bench_gpt2 --losses).

Usage: gpt2_loss_parity.py REF_LOG VOLT_LOG [--rtol R] [--require-graphs]
Each log may hold other lines; the last JSON line with "losses" is used. Prints one JSON line (steps, the largest
relative difference and its step, both first and last losses) and exits 1 when a step differs by more than
--rtol (default 0.01, issue 27's bound for bf16-mixed on a GPU), 2 when a log has no losses or they differ in
length. With --require-graphs VOLT_LOG's run must have captured its step ("cuda_graphs": "on"; a failed capture
runs the steps eagerly, which would compare eager with eager), else the exit status is 2."""
import argparse
import json
import sys

from json_lines import json_lines


def losses(path):
    found = [rec for rec in json_lines(path) if "losses" in rec]
    if not found:
        sys.exit(f"gpt2_loss_parity: no JSON line with losses in {path}")
    return found[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("volt")
    ap.add_argument("--rtol", type=float, default=0.01)
    ap.add_argument("--require-graphs", action="store_true")
    a = ap.parse_args()
    ref, volt = losses(a.ref), losses(a.volt)
    if a.require_graphs and volt.get("cuda_graphs") != "on":
        print(f"gpt2_loss_parity: {a.volt} did not capture its step (cuda_graphs {volt.get('cuda_graphs')!r})",
              file=sys.stderr)
        return 2
    r, v = ref["losses"], volt["losses"]
    if len(r) != len(v) or not r:
        print(f"gpt2_loss_parity: {len(r)} reference losses against {len(v)} of Volt's", file=sys.stderr)
        return 2
    rel = [abs(x - y) / abs(x) for x, y in zip(r, v)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    ok = rel[worst] <= a.rtol
    print(json.dumps({"parity": "pass" if ok else "fail", "model": volt.get("model"),
                      "precision": volt.get("precision"), "steps": len(r), "rtol": a.rtol,
                      "max_rel_diff": rel[worst], "worst_step": worst, "ref_first": r[0], "volt_first": v[0],
                      "ref_last": r[-1], "volt_last": v[-1]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
