#!/usr/bin/env python3
"""Issue 27's GPT-2 ratios from one scripts/gpu_check.sh run (part 0), all measured in the same call on one GPU.

Usage: gpt2_gpu_summary.py LOGS_DIR
Reads the JSON lines of the part's logs (bench_gpt2_*, anchor_gpt2_*, trainer_gpt2_*) and prints one JSON line:
Volt's bf16-mixed tokens/s against PyTorch eager and torch.compile at the same model, batch and sequence length,
MFU, peak memory against PyTorch's, bf16-mixed against Volt's own 32-true, the same step captured as a CUDA graph,
the Trainer's one-rank DDP and ZeRO-1 over NCCL against its single device (all three eager) and its single device
with the step captured, the loss parity checks (against the reference, and the captured step's losses against the
eager step's), and each goal of the issue as met, missed or unmeasured (null). A missed goal
is a finding for the note, not a failed step: the exit status is 0 unless the logs cannot be read."""
import json
import os
import sys

from json_lines import json_lines


def first(records, **match):
    for r in records:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def ratio(a, b):
    return a / b if a and b else None


def goal(value, ok):
    return None if value is None else bool(ok(value))


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: gpt2_gpu_summary.py LOGS_DIR")
    logs = sys.argv[1]
    read = lambda name: json_lines(os.path.join(logs, name + ".log"))
    bf16 = first(read("bench_gpt2_124M_bf16"), impl="volt")
    # The same step with VOLT_DISABLE_KERNELS=all; it stands in for the step when that printed nothing (a new
    # kernel path failed on this GPU).
    older = first(read("bench_gpt2_124M_bf16_fallbacks"), impl="volt")
    fallbacks = bf16 is None and older is not None
    if fallbacks:
        bf16 = older
    fp32 = first(read("bench_gpt2_124M_fp32"), impl="volt")
    # The same step on Volt's own attention (cuDNN's switched off): in chunks of query rows when it says so.
    own = first(read("bench_gpt2_124M_bf16_fused_attn"), impl="volt")
    # The same step captured as a CUDA graph and replayed (bench_gpt2 --cuda-graphs).
    graphs = first(read("bench_gpt2_124M_bf16_graphs"), impl="volt")
    graphs_state = graphs.get("cuda_graphs") if graphs else None
    if graphs_state != "on":  # a failed capture ran eagerly: no graph figures
        graphs = None
    anchor = read("anchor_gpt2_124M")
    eager, compiled = first(anchor, mode="eager"), first(anchor, mode="compile")
    trainer = {s: first(read("trainer_gpt2_" + s)) for s in ("single_device", "ddp", "zero1", "single_device_graphs")}
    # scripts/gpt2_loss_parity.py's lines: "pass" or "fail", with the largest relative difference. The captured
    # run's comparison counts only when its step was captured (a failed capture runs the steps eagerly).
    parity, graphs_parity = first(read("gpt2_loss_parity")), first(read("gpt2_graphs_loss_parity"))
    parity_graphed = first(read("bench_gpt2_parity_graphs"), impl="volt")
    if not parity_graphed or parity_graphed.get("cuda_graphs") != "on":
        graphs_parity = None
    tps = lambda r: r.get("tokens_per_s") if r else None
    ttps = lambda r: r.get("train_tokens_per_second") if r else None
    s = {
        "batch": bf16.get("batch") if bf16 else None,
        "volt_tokens_per_s": tps(bf16), "torch_eager_tokens_per_s": tps(eager),
        "torch_compile_tokens_per_s": tps(compiled),
        "vs_torch_compile": ratio(tps(bf16), tps(compiled)), "vs_torch_eager": ratio(tps(bf16), tps(eager)),
        "volt_mfu": bf16.get("mfu") if bf16 else None,
        "torch_compile_mfu": compiled.get("mfu") if compiled else None,
        "volt_peak_mem_gib": bf16.get("peak_mem_gib") if bf16 else None,
        "volt_reserved_mem_gib": bf16.get("reserved_mem_gib") if bf16 else None,
        # cudaMalloc calls during the timed steps (0 once the caching allocator holds a step).
        "volt_timed_system_allocs": bf16.get("timed_system_allocs") if bf16 else None,
        "torch_compile_peak_mem_gib": compiled.get("peak_mem_gib") if compiled else None,
        "torch_eager_peak_mem_gib": eager.get("peak_mem_gib") if eager else None,
        "bf16_vs_fp32": ratio(tps(bf16), tps(fp32)),
        "fp32_peak_mem_gib": fp32.get("peak_mem_gib") if fp32 else None,
        "own_attention_vs_cudnn": ratio(tps(own), tps(bf16)) if bf16 and bf16.get("attention") == "cudnn" else None,
        "own_attention_peak_mem_gib": own.get("peak_mem_gib") if own else None,
        "own_attention_chunked_calls": own.get("attention_chunked_calls") if own else None,
        "attention": bf16.get("attention") if bf16 else None,
        "kernel_paths_disabled": "all" if fallbacks else "",
        "new_paths_speedup": None if fallbacks else ratio(tps(bf16), tps(older)),
        # The same step's peak memory with every switchable path off (the head's chunks among them).
        "fallbacks_peak_mem_gib": older.get("peak_mem_gib") if older else None,
        "volt_graphs": graphs_state,
        "volt_graphs_tokens_per_s": tps(graphs),
        "graphs_speedup": ratio(tps(graphs), tps(bf16)),
        "graphs_vs_torch_compile": ratio(tps(graphs), tps(compiled)),
        "graphs_vs_torch_eager": ratio(tps(graphs), tps(eager)),
        "volt_graphs_mfu": graphs.get("mfu") if graphs else None,
        "loss_parity_max_rel_diff": parity.get("max_rel_diff") if parity else None,
        "graphs_loss_parity_max_rel_diff": graphs_parity.get("max_rel_diff") if graphs_parity else None,
        "trainer_tokens_per_s": {k: ttps(v) for k, v in trainer.items()},
        "trainer_graphs_vs_single": ratio(ttps(trainer["single_device_graphs"]), ttps(trainer["single_device"])),
        "ddp1_vs_single": ratio(ttps(trainer["ddp"]), ttps(trainer["single_device"])),
        "zero1_vs_single": ratio(ttps(trainer["zero1"]), ttps(trainer["single_device"])),
    }
    mem_ok = None
    if s["volt_peak_mem_gib"] is not None and s["torch_compile_peak_mem_gib"] is not None:
        mem_ok = s["volt_peak_mem_gib"] <= min(s["torch_compile_peak_mem_gib"], s["torch_eager_peak_mem_gib"] or 1e9)
    s["goals"] = {
        "vs_compile_ge_1.15": goal(s["vs_torch_compile"], lambda v: v >= 1.15),
        "vs_eager_ge_1.5": goal(s["vs_torch_eager"], lambda v: v >= 1.5),
        # The same goals for the captured step (a graph is Volt's own way to run the step, not the reference's).
        "graphs_vs_compile_ge_1.15": goal(s["graphs_vs_torch_compile"], lambda v: v >= 1.15),
        "graphs_vs_eager_ge_1.5": goal(s["graphs_vs_torch_eager"], lambda v: v >= 1.5),
        "graphs_mfu_ge_0.45": goal(s["volt_graphs_mfu"], lambda v: v >= 0.45),
        "mfu_ge_0.45": goal(s["volt_mfu"], lambda v: v >= 0.45),
        "peak_mem_le_torch": mem_ok,
        "bf16_vs_fp32_ge_3": goal(s["bf16_vs_fp32"], lambda v: v >= 3.0),
        "ddp1_within_3pct": goal(s["ddp1_vs_single"], lambda v: v >= 0.97),
        "zero1_within_3pct": goal(s["zero1_vs_single"], lambda v: v >= 0.97),
        "bf16_loss_parity_within_1pct": goal(parity, lambda p: p.get("parity") == "pass"),
        # The captured step computes what the eager one does (else its speed means nothing).
        "graphs_losses_follow_eager": goal(graphs_parity, lambda p: p.get("parity") == "pass"),
    }
    print(json.dumps({"gpt2_summary": s}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
