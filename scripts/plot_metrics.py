#!/usr/bin/env python3
"""Plots a run's metrics.csv (written by Volt's CSVLogger) as PNG curves.

    python3 scripts/plot_metrics.py runs/mnist/lightning_logs/version_0             # -> .../metrics.png
    python3 scripts/plot_metrics.py path/to/metrics.csv --out curves.png

One subplot per metric, x = the "step" column. Columns that differ only by a stage prefix (train_, val_, valid_,
validation_, test_, or the same followed by "/") or by a _step / _epoch suffix share a subplot, so train_loss_step,
train_loss_epoch and val_loss are drawn together under "loss". The "epoch" column is not plotted. Prints one line
per subplot: "<base>: <columns>". Needs matplotlib (pip install matplotlib, or apt-get install
python3-matplotlib for Debian's /usr/bin/python3).
"""
import argparse
import csv
import io
import math
import os
import re
import sys

_PREFIX = re.compile(r"^(train|val|valid|validation|test)[_/]")
_SUFFIX = re.compile(r"_(step|epoch)$")


def base_name(column):
    return _SUFFIX.sub("", _PREFIX.sub("", column)) or column


def read_series(path):
    """{column: [(step, value), ...]} for every metric column, skipping empty cells."""
    with open(path, newline="") as f:
        text = f.read()
    # CSVLogger appends rows; a run killed inside an append can leave a last line without its newline.
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None or "step" not in reader.fieldnames:
        raise ValueError(f"{path}: no 'step' column in the header; expected a metrics.csv written by CSVLogger")
    series = {c: [] for c in reader.fieldnames if c not in ("step", "epoch")}
    for line, row in enumerate(reader, start=2):
        if not row.get("step"):
            continue
        try:
            step = float(row["step"])
            for c in series:
                if row.get(c):
                    series[c].append((step, float(row[c])))
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
    return {c: pts for c, pts in series.items() if pts}


def main(argv=None):
    parser = argparse.ArgumentParser(description="Plot a Volt run's metrics.csv as PNG curves.")
    parser.add_argument("path", help="metrics.csv, or the log directory (lightning_logs/version_N) that holds it")
    parser.add_argument("--out", help="PNG to write (default: metrics.png beside metrics.csv)")
    args = parser.parse_args(argv)

    path = os.path.join(args.path, "metrics.csv") if os.path.isdir(args.path) else args.path
    if not os.path.isfile(path):
        print(f"plot_metrics: {path}: no such file; expected a metrics.csv or a directory holding one",
              file=sys.stderr)
        return 2
    try:
        series = read_series(path)
    except ValueError as e:
        print(f"plot_metrics: {e}", file=sys.stderr)
        return 2
    if not series:
        print(f"plot_metrics: {path} has no metric values to plot", file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics: matplotlib is not installed for " + sys.executable +
              " (pip install matplotlib, or apt-get install python3-matplotlib and run /usr/bin/python3)",
              file=sys.stderr)
        return 3

    groups = {}
    for column in sorted(series):
        groups.setdefault(base_name(column), []).append(column)
    ncols = min(3, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.5 * nrows), squeeze=False)
    for ax, (base, columns) in zip(axes.flat, sorted(groups.items())):
        for column in columns:
            pts = series[column]
            # Epoch and validation values are few: markers keep single points visible.
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) <= 50 else None,
                    markersize=3, label=column)
        ax.set_title(base)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        print(f"{base}: {', '.join(columns)}")
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.tight_layout()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), "metrics.png")
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
