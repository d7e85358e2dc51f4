#pragma once
// Switches for the newest kernel paths, read once from VOLT_DISABLE_KERNELS: a comma-separated list of the path
// names below, or "all". Each path has an older fallback that computes the same result (to rounding) and that the
// switch selects instead, so that a path misbehaving on a GPU it was never run on can be told apart from the rest
// and routed around without a rebuild (scripts/gpu_check.sh times its GPT-2 benchmark with "all" too, and keeps
// "all" when the first run fails). Host-only; the ops and the CPU and CUDA backends ask before choosing a path.
//   warp_norm       the warp-per-row LayerNorm kernels (kernels/cuda/warp_rows.cuh) -> the block-per-row kernels
//   packed_columns  16-byte packs in the column reductions (sum_cols, bias_act_bwd) -> one column per thread
//   lt_dgelu        fused_mlp's GELU backward in a cuBLASLt DGELU epilogue -> the product, then bias_act_bwd
//   half_residual   residual_layer_norm_for_matmul reading a half residual as it is -> cast to f32 first
//   classifier_rows fused_cross_entropy's CUDA rows held in registers (GPT-2's vocabulary) -> the block kernel
//   chunked_head    linear_cross_entropy's row chunks, gradients formed in the forward -> the whole logits, then
//                   fused_cross_entropy (GPT-2's head and loss, with their memory)
//   lt_bgrad        a linear layer's bias gradient in its weight-gradient product (cuBLASLt BGRADB epilogue) ->
//                   the product, then a column reduction
//   chunked_attention  Volt's own attention without weights or a learned mask a chunk of query rows at a time, the
//                   weights recomputed in the backward -> the whole (batch..., L, S) weights, kept for the backward
#include <string>

namespace volt::kernel_paths {

enum Path : unsigned {
  kWarpNorm = 1u << 0,
  kPackedColumns = 1u << 1,
  kLtDgelu = 1u << 2,
  kHalfResidual = 1u << 3,
  kClassifierRows = 1u << 4,
  kChunkedHead = 1u << 5,
  kLtBgrad = 1u << 6,
  kChunkedAttention = 1u << 7,
};
inline constexpr unsigned kAll =
    kWarpNorm | kPackedColumns | kLtDgelu | kHalfResidual | kClassifierRows | kChunkedHead | kLtBgrad |
                                kChunkedAttention;

// The paths a list names ("" or unset: none; "all": every one); whitespace around names is ignored. An unknown name
// is a volt::Error naming it and the known ones.
unsigned parse(const std::string& list);
// The names of the paths in `set`, comma-separated in the order above ("" for none).
std::string names(unsigned set);
// Whether VOLT_DISABLE_KERNELS turns `p` off (the variable is read and parsed at the first call).
bool disabled(Path p);
// Counts a call that took path `p` (the backends note the paths whose fallback is chosen at run time, e.g. by a
// library's heuristics, so that a GPU test can tell the path from its fallback), and the count so far.
void note_taken(Path p);
long long times_taken(Path p);

}  // namespace volt::kernel_paths
