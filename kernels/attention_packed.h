#pragma once
/// @file
/// Causal self-attention read straight from a fused qkv projection (kernels/ops/attention_packed.cpp), as GPT-2's
/// attention (nn/models/gpt2.cpp) uses it.
#include <cstdint>

#include <volt/kernels/tensor.h>

namespace volt {

/// causal_self_attention_packed: qkv (B, T, 3C) floating, q | k | v along the last dim (columns [0, C), [C, 2C),
/// [2C, 3C)), each C = n_head * D with head h at columns [h * D, (h + 1) * D) of its part. Returns (B, T, C), head h
/// at columns [h * D, (h + 1) * D): the same values as
///   head(i) = qkv.narrow(2, i * C, C).reshape({B, T, n_head, D}).transpose(1, 2);
///   y = scaled_dot_product_attention(head(0), head(1), head(2), Tensor(), 0.0, /*is_causal=*/true);
///   y.transpose(1, 2).reshape({B, T, C});
/// (scale 1 / sqrt(D), query t attends to keys 0..t), with the same autograd and autocast rules.
/// Where scaled_dot_product_attention would run cuDNN's fused SDPA on that call (kernels/sdpa_path.h: a CUDA device,
/// f16/bf16 after autocast, D a multiple of 8 up to cuDNN's limit, VOLT_DISABLE_CUDNN_SDPA unset), cuDNN reads q, k
/// and v in place from qkv, writes the output straight into the (B, T, C) result, and its backward reads the (B, T,
/// C) gradient and writes dq, dk and dv straight into one (B, T, 3C) gradient: no transposes, no copies, no slice
/// sums. Such a call counts as one cuDNN call in sdpa_stats(). Every other call (the CPU, f32/f64, a configuration
/// cuDNN refuses) runs exactly the composition above, which counts itself. A second derivative through a cuDNN call
/// is taken through the composition.
/// Errors: qkv undefined, not floating, not 3-D, or its last dim not a multiple of 3 * n_head; n_head < 1.
Tensor causal_self_attention_packed(const Tensor& qkv, int64_t n_head);

}  // namespace volt
