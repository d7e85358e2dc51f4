#pragma once
/// @file
/// Which implementation scaled_dot_product_attention (<volt/kernels/ops.h>) ran. On a CUDA device of compute
/// capability 8.0 or newer, in a build that found the cuDNN frontend headers (scripts/setup.sh fetches them), a call
/// with f16/bf16 q, k and v of the same batch dims, head dims that are multiples of 8 (up to 128, 256 on sm_90), no
/// attn_mask (is_causal or none) and no dropout runs cuDNN's fused SDPA (flash attention), forward and backward,
/// unless cuDNN refuses that configuration. Every other call, and every call on the CPU, runs Volt's own fused
/// masked softmax between two matmuls (in chunks of query rows without weights or a learned mask: see
/// set_sdpa_chunk_bytes). VOLT_DISABLE_CUDNN_SDPA=1 in the environment (read at each call) sends CUDA
/// calls to Volt's kernel too. A second derivative through a cuDNN call is taken through Volt's kernel.
#include <cstdint>
#include <string>

namespace volt {

/// Forward calls of scaled_dot_product_attention (and of its _with_weights variant) by path, counted process-wide
/// since the start or the last reset_sdpa_stats().
struct SdpaStats {
  int64_t cudnn = 0;  ///< through cuDNN's fused SDPA
  int64_t fused = 0;  ///< through Volt's fused softmax (the CPU, or a CUDA call cuDNN did not take)
  /// Why the latest CUDA call that ran Volt's kernel did not go to cuDNN ("" when none has).
  std::string last_fallback_reason;
  int64_t chunked = 0;  ///< of the `fused` calls, those that ran in chunks of query rows (see set_sdpa_chunk_bytes)
};

/// The counts so far (thread-safe).
SdpaStats sdpa_stats();
/// Sets the counts to zero and clears the reason.
void reset_sdpa_stats();
/// "cudnn" or "fused" when only that path ran, "mixed" when both did, "none" when neither: for logs and benchmarks.
std::string sdpa_path_summary(const SdpaStats& stats);
/// Volt's own path runs a call without weights, whose attn_mask (if any) is bool or needs no gradient, a
/// chunk of query rows at a time: each chunk's scores, softmax and products, so no (batch..., L, S) tensor outlives
/// a chunk, and the backward keeps only q, k and v and recomputes each chunk's weights (one more product; under
/// is_causal a chunk stops at its last query's key, and a call runs in at least 8 chunks of 64 rows or more). This
/// sets the most bytes one chunk's scores (batch..., rows, S) may take, process-wide (default 256 MiB; `bytes` < 1
/// restores it); a call's backward keeps its forward's chunks. VOLT_DISABLE_KERNELS=chunked_attention keeps the
/// whole weights instead (kernels/common/kernel_paths.h).
void set_sdpa_chunk_bytes(int64_t bytes);
int64_t sdpa_chunk_bytes();
/// Whether this build has cuDNN's fused SDPA (a CUDA build that found the cuDNN frontend headers; CMake option
/// VOLT_CUDNN_SDPA). Says nothing about whether a GPU is present.
bool cudnn_sdpa_built();

}  // namespace volt
