#pragma once
// The fused masked, scaled softmax inside scaled_dot_product_attention (kernels/ops/attention_ops.cpp;
// kernels/cpu/attention.cpp, kernels/cuda/attention.cu). The math is kernels/common/attention.h.
//
// Contracts (checked by the op, assumed here): scores, out, grad_out and grad_scores are contiguous (p.rows,
// p.k_len) tensors of one floating dtype T; the mask is undefined (p.mask None), bool (Keep) or in the
// accumulation dtype (Additive: f64 for f64 scores, else f32), a view whose element for (row r, key j) is
// data_ptr() + p.geom.row_offset(r) + j * p.geom.col_stride; grad_bias, when defined, is contiguous (p.rows,
// p.k_len) in the accumulation dtype. p.rows >= 1 and p.k_len >= 1.
#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/attention.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct AttentionKernels {
  // out = softmax over keys of the masked, scaled scores; rows with every key masked get zeros.
  // Dispatch dtype: scores' (floating).
  Kernel<void(const Tensor& out, const Tensor& scores, const Tensor& mask, const AttnParams& p)> attn_softmax_fwd;
  // From the saved weights y (= out above) and grad_out g: dz = y * (g - sum(g * y)) per row; grad_scores =
  // dz * scale and, when defined, grad_bias = dz (the additive mask's gradient). Dispatch dtype: weights'.
  Kernel<void(const Tensor& grad_scores, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& weights,
              const AttnParams& p)>
      attn_softmax_bwd;
};

template <>
struct Family<AttentionKernels> {
  static constexpr const char* name = "attention";
  static constexpr std::tuple kernels{Named{&AttentionKernels::attn_softmax_fwd, "attn_softmax_fwd"},
                                      Named{&AttentionKernels::attn_softmax_bwd, "attn_softmax_bwd"}};
};

}  // namespace volt::backend
