#!/usr/bin/env bash
# examples/gpt2 under DDP (or --strategy zero1/zero2/fsdp) against one process: N ranks at batch B/N and one
# process at batch B train on the same windows per step (--no-shuffle), so after the same steps their weights
# agree to rounding. Prints the largest weight difference and fails above `tol`. Needs mpirun and python3 with
# numpy (a developer check, not CI).
# Usage: scripts/check_gpt2_ddp.sh <build>/examples/gpt2 [ranks=2] [steps=30] [tol=1e-4] [strategy=ddp]
# Measured (30 steps, lr 6e-4, CPU): ddp x2 2.4e-6, ddp x3 5.9e-6, zero1 x2 and fsdp x2 2.4e-6. At lr 3e-3
# without warm-up the two runs agree to 1.2e-5 for 10 steps, then drift apart from differences of one ulp (3e-3
# by step 26): that run is chaotic, not wrong, which is why this check uses the reference's lr.
set -euo pipefail
exe="$1"
ranks="${2:-2}"
steps="${3:-30}"
tol="${4:-1e-4}"
strategy="${5:-ddp}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--accelerator cpu --no-shuffle --max-steps "$steps" --warmup-steps 0 --lr 6e-4 --no-progress-bar
        --no-checkpointing --logger none --seed 1 --limit-val-batches 0)
"$exe" "${common[@]}" --batch-size $((4 * ranks)) --out "$work/one" --save-weights "$work/one.safetensors" \
  >"$work/one.log" 2>&1 || { tail -n 20 "$work/one.log"; exit 1; }
mpirun -np "$ranks" --oversubscribe "$exe" "${common[@]}" --batch-size 4 --strategy "$strategy" --out "$work/ddp" \
  --save-weights "$work/ddp.safetensors" >"$work/ddp.log" 2>&1 || { tail -n 20 "$work/ddp.log"; exit 1; }
python3 - "$work/one.safetensors" "$work/ddp.safetensors" "$tol" "$ranks" "$steps" "$strategy" <<'PYEOF'
import json, struct, sys
import numpy as np
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    d = raw[8 + n:]
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32)
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
print(f"gpt2 {sys.argv[6]} x{sys.argv[4]} vs one process after {sys.argv[5]} steps: "
      f"largest weight difference {worst:.3g}")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
PYEOF
