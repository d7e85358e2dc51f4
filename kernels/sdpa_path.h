#pragma once
/// @file
/// Which implementation scaled_dot_product_attention (<volt/kernels/ops.h>) ran. On a CUDA device of compute
/// capability 8.0 or newer, in a build that found the cuDNN frontend headers (scripts/setup.sh fetches them), a call
/// with f16/bf16 q, k and v of the same batch dims, head dims that are multiples of 8 (up to 128, 256 on sm_90), no
/// attn_mask (is_causal or none) and no dropout runs cuDNN's fused SDPA (flash attention), forward and backward,
/// unless cuDNN refuses that configuration. Every other call, and every call on the CPU, runs Volt's own fused
/// masked softmax between two matmuls. VOLT_DISABLE_CUDNN_SDPA=1 in the environment (read at each call) sends CUDA
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
};

/// The counts so far (thread-safe).
SdpaStats sdpa_stats();
/// Sets the counts to zero and clears the reason.
void reset_sdpa_stats();
/// "cudnn" or "fused" when only that path ran, "mixed" when both did, "none" when neither: for logs and benchmarks.
std::string sdpa_path_summary(const SdpaStats& stats);
/// Whether this build has cuDNN's fused SDPA (a CUDA build that found the cuDNN frontend headers; CMake option
/// VOLT_CUDNN_SDPA). Says nothing about whether a GPU is present.
bool cudnn_sdpa_built();

}  // namespace volt
