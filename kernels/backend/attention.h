#pragma once
// The fused masked, scaled softmax inside scaled_dot_product_attention (kernels/ops/attention_ops.cpp;
// kernels/cpu/attention.cpp, kernels/cuda/attention.cu). The math is kernels/common/attention.h.
//
// Contracts (checked by the op, assumed here): scores, out, grad_out and grad_scores are contiguous (p.rows,
// p.k_len) tensors of one floating dtype T; the mask is undefined (p.mask None), bool (Keep) or in the
// accumulation dtype (Additive: f64 for f64 scores, else f32), a view whose element for (row r, key j) is
// data_ptr() + p.geom.row_offset(r) + j * p.geom.col_stride; grad_bias, when defined, is contiguous (p.rows,
// p.k_len) in the accumulation dtype. p.rows >= 1 and p.k_len >= 1.
//
// flash_attn_fwd/flash_attn_bwd are the whole attention through cuDNN's fused SDPA (kernels/cuda/attention_cudnn.cu).
// Only the CUDA backend of a build that found the cuDNN frontend headers has them (the CPU never does: there the
// op always runs the fused softmax above between two matmuls). The op calls them only for requests that
// flash_attention_refusal (kernels/common/flash_attention.h) accepts, with q, k, v of one dtype (f16 or bf16) laid
// out as p.q, p.k, p.v say, out as p.o says (scaled_dot_product_attention: contiguous (b, h, s_q, d_v);
// causal_self_attention_packed: heads of a (B, T, C) tensor) and, when p.training, stats contiguous (b, h, s_q, 1)
// f32. Only data_ptr(), dtype and device of these tensors are read: the layouts are p's.
#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/attention.h>
#include <volt/kernels/common/flash_attention.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct AttentionKernels {
  // out = softmax over keys of the masked, scaled scores; rows with every key masked get zeros. out may be scores
  // itself (in place: each element is read before it is written, by the thread that writes it). Row r is query
  // r % p.q_len + p.q_offset for the causal triangle; a mask's rows are the scores' own (p.geom.row_offset(r)), so
  // a chunk of rows with a mask needs its own geometry. Dispatch dtype: scores' (floating).
  Kernel<void(const Tensor& out, const Tensor& scores, const Tensor& mask, const AttnParams& p)> attn_softmax_fwd;
  // From the saved weights y (= out above) and grad_out g: dz = y * (g - sum(g * y)) per row; grad_scores =
  // dz * scale and, when defined, grad_bias = dz (the additive mask's gradient). grad_scores may be grad_out itself
  // (in place, as above). Dispatch dtype: weights'.
  Kernel<void(const Tensor& grad_scores, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& weights,
              const AttnParams& p)>
      attn_softmax_bwd;
  // out = softmax(q k^T * p.scale, causal when p.causal) v, and with p.training the rows' log-sum-exp in stats.
  // Plans (cached per shape, layout, dtype, scale and mask) the forward graph, and the backward one when
  // p.training; when cuDNN refuses either, sets status->refusal, launches nothing and leaves out/stats unwritten.
  // Dispatch dtype: q's.
  Kernel<void(const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
              const FlashAttnParams& p, FlashAttnStatus* status)>
      flash_attn_fwd;
  // dq, dk, dv from dout and the forward's out and stats, for a p that flash_attn_fwd accepted with p.training;
  // dout, dq, dk, dv laid out as flash_attention_grad_layouts(p) says (by default dout as out, dq, dk, dv
  // contiguous, shaped as q, k, v). Dispatch dtype: q's.
  Kernel<void(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
              const Tensor& v, const Tensor& out, const Tensor& dout, const Tensor& stats, const FlashAttnParams& p)>
      flash_attn_bwd;
};

template <>
struct Family<AttentionKernels> {
  static constexpr const char* name = "attention";
  static constexpr std::tuple kernels{Named{&AttentionKernels::attn_softmax_fwd, "attn_softmax_fwd"},
                                      Named{&AttentionKernels::attn_softmax_bwd, "attn_softmax_bwd"},
                                      Named{&AttentionKernels::flash_attn_fwd, "flash_attn_fwd"},
                                      Named{&AttentionKernels::flash_attn_bwd, "flash_attn_bwd"}};
};

}  // namespace volt::backend
