#pragma once
// Backend kernels of the fused masked, scaled softmax inside scaled_dot_product_attention
// (kernels/ops/attention_ops.cpp). volt::cpu (kernels/cpu/attention.cpp) and volt::cuda (kernels/cuda/attention.cu)
// implement both functions; callers pick one with VOLT_DISPATCH_DEVICE after checking arguments.
//
// Contracts (checked by the op, assumed here): scores, out, grad_out and grad_scores are contiguous (p.rows,
// p.k_len) tensors of one floating dtype T; the mask is undefined (p.mask None), bool (Keep) or in the
// accumulation dtype (Additive: f64 for f64 scores, else f32), a view whose element for (row r, key j) is
// data_ptr() + p.geom.row_offset(r) + j * p.geom.col_stride; grad_bias, when defined, is contiguous (p.rows,
// p.k_len) in the accumulation dtype. p.rows >= 1 and p.k_len >= 1. The math is kernels/common/attention.h.
#include <volt/kernels/common/attention.h>
#include <volt/kernels/tensor.h>

namespace volt {

#define VOLT_ATTN_BACKEND_DECLS                                                                              \
  /* out = softmax over keys of the masked, scaled scores (kernels/common/attention.h); all-masked rows 0. */ \
  void attn_softmax_fwd(const Tensor& out, const Tensor& scores, const Tensor& mask, const AttnParams& p);   \
  /* From the saved weights y (= out above) and grad_out g: dz = y * (g - sum(g * y)) per row;               \
     grad_scores = dz * scale and, when defined, grad_bias = dz (the additive mask's gradient). */          \
  void attn_softmax_bwd(const Tensor& grad_scores, const Tensor& grad_bias, const Tensor& grad_out,          \
                        const Tensor& weights, const AttnParams& p);

namespace cpu { VOLT_ATTN_BACKEND_DECLS }
namespace cuda { VOLT_ATTN_BACKEND_DECLS }
#undef VOLT_ATTN_BACKEND_DECLS

}  // namespace volt
