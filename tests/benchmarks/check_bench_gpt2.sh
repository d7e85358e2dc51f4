#!/usr/bin/env bash
# bench_gpt2's JSON line on the CPU (tiny model, a few seconds): --repeats 3 gives min <= median <= max with
# ms_per_step the median, the memory fields are present (peak_mem_gib, peak_mem_bytes, reserved_mem_gib), and the
# same step with VOLT_DISABLE_KERNELS=chunked_head (GPT-2's head as linear, then fused_cross_entropy) starts from
# the same loss: the chunked head changes memory, not the model. With --replay-allocator the replay_* fields are
# there, the replayed requests peak where the CPU allocator's own peak is, and neither policy's peak is below it.
# With --cuda-graphs the step is captured ("cuda_graphs":"on") and every step's loss is the eager run's as printed
# (six decimals; the CPU's graph replays the same kernels).
# Usage: check_bench_gpt2.sh <bench_gpt2>
set -euo pipefail
bench="$1"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
args=(--accelerator cpu --model tiny --vocab 512 --batch 4 --seq 32 --precision bf16-mixed --steps 2 --warmup 1
      --repeats 3)
new="$(run "$bench" "${args[@]}" | grep '^{')"
old="$(VOLT_DISABLE_KERNELS=chunked_head run "$bench" "${args[@]}" | grep '^{')"
replay="$(run "$bench" "${args[@]}" --replay-allocator | grep '^{')"
eager="$(run "$bench" "${args[@]}" --losses | grep '^{')"
graphed="$(run "$bench" "${args[@]}" --losses --cuda-graphs | grep '^{')"
python3 - "$new" "$old" "$replay" "$eager" "$graphed" <<'PY'
import json, sys
new, old, replay, eager, graphed = (json.loads(a) for a in sys.argv[1:6])
if new.get("cuda_graphs") != "off" or graphed.get("cuda_graphs") != "on":
    sys.exit(f"FAIL: cuda_graphs {new.get('cuda_graphs')!r} without the flag, {graphed.get('cuda_graphs')!r} with it")
# The graphed run takes one more step (the captured step's first replay, untimed) from the same token stream.
if len(graphed["losses"]) != len(eager["losses"]) + 1 or graphed["losses"][:len(eager["losses"])] != eager["losses"]:
    sys.exit(f"FAIL: captured steps' losses {graphed['losses']} differ from the eager ones {eager['losses']}")
gib = replay["peak_mem_bytes"] / 2**30
if abs(replay.get("replay_requested_peak_gib", -1) - gib) > 1e-4:
    sys.exit(f"FAIL: replayed requests peak {replay.get('replay_requested_peak_gib')} GiB, the run's {gib}: {replay}")
for k in ("replay_split_peak_gib", "replay_whole_peak_gib", "replay_split_reserved_gib", "replay_whole_reserved_gib"):
    if not replay.get(k, -1) >= replay["replay_requested_peak_gib"] - 1e-4:
        sys.exit(f"FAIL: {k} below the tensors' own peak: {replay}")
for k in ("ms_per_step", "ms_per_step_min", "ms_per_step_max", "tokens_per_s", "peak_mem_gib", "peak_mem_bytes",
          "reserved_mem_gib", "first_loss", "last_loss"):
    if k not in new or new[k] is None:
        sys.exit(f"FAIL: no {k} in {new}")
if not new["ms_per_step_min"] <= new["ms_per_step"] <= new["ms_per_step_max"] or new["repeats"] != 3:
    sys.exit(f"FAIL: ms_per_step not the median of 3 runs: {new}")
if not (new["peak_mem_bytes"] > 0 and new["reserved_mem_gib"] >= 0 and new.get("timed_system_allocs", -1) >= 0):
    sys.exit(f"FAIL: memory fields: {new}")
if abs(new["first_loss"] - old["first_loss"]) > 1e-4 * abs(old["first_loss"]):
    sys.exit(f"FAIL: first loss {new['first_loss']} with the chunked head, {old['first_loss']} without")
print(f"ok: {new['ms_per_step']:.1f} ms/step (min {new['ms_per_step_min']:.1f}, max {new['ms_per_step_max']:.1f}), "
      f"first loss {new['first_loss']} both ways, peak {new['peak_mem_bytes']} bytes "
      f"({old['peak_mem_bytes']} with chunked_head off); replayed peaks: split {replay['replay_split_peak_gib']}, "
      f"whole blocks {replay['replay_whole_peak_gib']} GiB; captured step: {len(graphed['losses'])} losses equal")
PY
