"""The JSON objects a log holds, one per line (other lines, and lines that do not parse, are skipped): the form in
which Volt's benchmarks and the PyTorch anchors print their figures. Imported by the scripts beside it."""
import json
import os


def json_lines(path):
    """Every line of `path` that is a JSON object, parsed, in order; [] when the file does not exist."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out
