#pragma once
// layer_norm and group_norm (kernels/ops/norm_ops.cpp; kernels/cpu/norm.cpp, kernels/cuda/norm.cu); the math is
// kernels/common/norm.h. batch_norm is kernels/backend/batch_norm.h.
//
// Contracts (checked by the ops, assumed here): x, out, grad_out and grad_x are contiguous (g.rows, g.row_size)
// tensors of one floating dtype T; mean and rstd are (g.rows) and weight, bias, grad_weight and grad_bias are
// (g.num_params()), all contiguous in the accumulation dtype (f64 for f64 x, f32 otherwise). weight and bias may
// be undefined (no affine transform: w = 1, b = 0); a gradient tensor that is undefined is not computed.
// g.rows >= 1 and g.row_size >= 1.
#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/norm.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct NormKernels {
  // out = (x - mean) * rstd * w + b per row; mean and rstd (biased variance + eps) are saved.
  // Dispatch dtype: x's (floating).
  Kernel<void(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
              const Tensor& bias, const NormGeom& g, double eps)>
      norm_fwd;
  // grad_x, grad_weight (sum of dy * xhat) and grad_bias (sum of dy), from the saved statistics.
  // Dispatch dtype: x's (floating).
  Kernel<void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
              const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g)>
      norm_bwd;
};

template <>
struct Family<NormKernels> {
  static constexpr const char* name = "norm";
  static constexpr std::tuple kernels{Named{&NormKernels::norm_fwd, "norm_fwd"},
                                      Named{&NormKernels::norm_bwd, "norm_bwd"}};
};

}  // namespace volt::backend
