#!/usr/bin/env python3
"""The end of scripts/gpu_check.sh: one table of every step, the GPU-only tests that ran and those that skipped,
one JSON file with every figure the steps printed, and the exit status (1 when any step failed).

Usage: gpu_check_report.py OUT_DIR
  OUT_DIR/steps.tsv   one line per step: name, status (pass, fail, timeout, skipped), exit status, seconds,
                      kind (test, gpu_test, bench, example, anchor, tool), note
  OUT_DIR/logs/NAME.log   each step's output; every line that is a JSON object counts as a figure
Writes OUT_DIR/results.json and prints the table on stdout."""
import json
import os
import re
import sys

GTEST_TOTAL = re.compile(r"^\[  (PASSED|FAILED|SKIPPED) +\] (\d+) tests?")
GTEST_RAN = re.compile(r"^\[ +(OK|FAILED) +\] (\S+\.\S+) \(\d+ ms\)")
GTEST_SKIP = re.compile(r"^\[  SKIPPED \] (\S+\.\S+) \(\d+ ms\)")


def die(message):
    print(f"gpu_check_report: {message}", file=sys.stderr)
    sys.exit(2)


def read_steps(path):
    steps = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 6:
                die(f"{path}:{n}: expected 6 tab-separated columns, got {len(cols)}")
            name, status, rc, secs, kind, note = cols
            if status not in ("pass", "fail", "timeout", "skipped"):
                die(f"{path}:{n}: unknown status '{status}'")
            steps.append({"name": name, "status": status, "rc": None if rc == "-" else int(rc),
                          "seconds": int(secs), "kind": kind, "note": note})
    return steps


def scan_log(path):
    """gtest totals, the tests that ran and skipped, and the JSON figures of one step's log."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    ran, skipped, figures = [], [], []
    if not os.path.exists(path):
        return totals, ran, skipped, figures
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = GTEST_TOTAL.match(line)
            if m:
                totals[m.group(1).lower()] = int(m.group(2))
                continue
            m = GTEST_RAN.match(line)
            if m:
                ran.append(m.group(2))
                continue
            m = GTEST_SKIP.match(line)
            if m:
                skipped.append(m.group(1))
                continue
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    figures.append(value)
    return totals, ran, skipped, figures


def main(argv):
    if len(argv) != 2:
        die("usage: gpu_check_report.py OUT_DIR")
    if not os.path.exists(os.path.join(argv[1], "steps.tsv")):
        die(f"no steps.tsv in {argv[1]}")
    out = argv[1]
    steps = read_steps(os.path.join(out, "steps.tsv"))
    header = os.path.join(out, "header.json")
    result = json.load(open(header, encoding="utf-8")) if os.path.exists(header) else {}
    result["steps"], result["figures"] = [], []
    gpu_ran, gpu_skipped = [], []
    for s in steps:
        totals, ran, skipped, figures = scan_log(os.path.join(out, "logs", s["name"] + ".log"))
        s["tests"] = totals
        s["figures"] = len(figures)
        result["steps"].append(s)
        result["figures"] += [{"step": s["name"], **f} for f in figures]
        if s["kind"] == "gpu_test":
            gpu_ran += [f'{s["name"]}: {t}' for t in ran]
            gpu_skipped += [f'{s["name"]}: {t}' for t in skipped]
    failed = [s["name"] for s in steps if s["status"] in ("fail", "timeout")]
    not_run = [s["name"] for s in steps if s["status"] == "skipped"]
    result["gpu_only_tests"] = {"ran": gpu_ran, "skipped": gpu_skipped}
    result["failed"], result["not_run"] = failed, not_run
    result["ok"] = not failed
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")

    width = max([len(s["name"]) for s in steps] + [4])
    print(f'{"step":<{width}}  {"status":<7}  {"rc":>4}  {"secs":>5}  {"tests ok/fail/skip":<18}  figures  note')
    for s in steps:
        t = s["tests"]
        tests = f'{t["passed"]}/{t["failed"]}/{t["skipped"]}' if any(t.values()) else "-"
        rc = "-" if s["rc"] is None else str(s["rc"])
        print(f'{s["name"]:<{width}}  {s["status"].upper():<7}  {rc:>4}  {s["seconds"]:>5}  {tests:<18}  '
              f'{s["figures"]:>7}  {s["note"]}'.rstrip())
    print(f"GPU-only tests: {len(gpu_ran)} ran, {len(gpu_skipped)} skipped")
    for t in gpu_skipped:
        print(f"  skipped  {t}")
    print(f'figures: {len(result["figures"])} in {os.path.join(out, "results.json")}')
    if not_run:
        print(f'not run: {len(not_run)} step(s): {" ".join(not_run)}')
    if failed:
        print(f'gpu_check: FAIL ({len(failed)} of {len(steps)} steps failed: {" ".join(failed)})')
        return 1
    print(f"gpu_check: PASS ({len(steps) - len(not_run)} steps ran, none failed)")
    return 0


if __name__ == "__main__":
    try:
        status = main(sys.argv)
    except (OSError, ValueError) as e:  # a report that cannot be made must not read as a failed step (1)
        die(str(e))
    sys.exit(status)
