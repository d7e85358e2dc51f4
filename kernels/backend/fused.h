#pragma once
// The fused ops of a transformer block and head (kernels/ops/fused_ops.cpp; kernels/cpu/fused.cpp,
// kernels/cuda/fused.cu): residual-add + layer norm, and the classifier (cross-entropy whose gradient is written
// in the forward pass). The math is kernels/common/fused.h.
//
// Contracts (checked by the ops, assumed here): every tensor is contiguous.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/fused.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct FusedKernels {
  // s = x + r and y = layer norm of s, for g.rows rows of g.row_size (g.groups == g.inner == 1); x, r, s, y are
  // (g.rows, g.row_size) of one floating dtype T. mean and rstd (g.rows) are saved in the accumulation dtype (f64
  // for f64, f32 otherwise), as are weight and bias (g.row_size; either may be undefined: w = 1, b = 0).
  // Dispatch dtype: x's (floating).
  Kernel<void(const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
              const Tensor& r, const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps)>
      residual_norm_fwd;
  // grad_s = layer-norm backward of grad_y (from s and the saved statistics) + grad_s_other (the gradient of s's
  // other uses; undefined: none), one pass per row. grad_s, grad_y, grad_s_other and s are (g.rows, g.row_size)
  // in T. The parameter gradients are norm_bwd's (kernels/backend/norm.h) run on s. Dispatch dtype: s's.
  Kernel<void(const Tensor& grad_s, const Tensor& grad_y, const Tensor& grad_s_other, const Tensor& s,
              const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g)>
      residual_norm_bwd;
  // Rows [row0, row0 + rows) of logits (n, v) in T with target i64 (n), valid indices or ignore_index: writes each
  // row's loss (lse - logit of the target; 0 for an ignored row) to loss_rows (rows, accumulation dtype) and, when
  // grad is defined, d loss / d logits scaled by `scale` (a 1-element tensor in the accumulation dtype: 1 / the
  // number of counted rows for a mean, 1 for a sum) into the same rows of grad (n, v) in T, which may be logits
  // itself (each row is read completely before it is written). Dispatch dtype: logits' (floating).
  Kernel<void(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
              const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index)>
      classifier_fwd;
};

template <>
struct Family<FusedKernels> {
  static constexpr const char* name = "fused";
  static constexpr std::tuple kernels{Named{&FusedKernels::residual_norm_fwd, "residual_norm_fwd"},
                                      Named{&FusedKernels::residual_norm_bwd, "residual_norm_bwd"},
                                      Named{&FusedKernels::classifier_fwd, "classifier_fwd"}};
};

}  // namespace volt::backend
