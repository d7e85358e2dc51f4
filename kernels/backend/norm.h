#pragma once
// layer_norm and group_norm (kernels/ops/norm_ops.cpp; kernels/cpu/norm.cpp, kernels/cuda/norm.cu); the math is
// kernels/common/norm.h. Also the fused residual_layer_norm's kernels (kernels/ops/fused_ops.cpp). batch_norm is
// kernels/backend/batch_norm.h.
//
// Contracts (checked by the ops, assumed here): x, out, grad_out and grad_x are contiguous (g.rows, g.row_size)
// tensors of one floating dtype T; mean and rstd are (g.rows) and weight, bias, grad_weight and grad_bias are
// (g.num_params()), all contiguous in the accumulation dtype (f64 for f64 x, f32 otherwise). weight and bias may
// be undefined (no affine transform: w = 1, b = 0); a gradient tensor that is undefined is not computed.
// g.rows >= 1 and g.row_size >= 1. One exception to "one dtype": the output (out, y) and its gradient (grad_out,
// grad_y) may be f16/bf16 for f32 x, in layer_norm's geometry (g.inner == 1), when the output feeds a matmul under
// autocast (kernels/common/norm_out.h; layer_norm_for_matmul in kernels/fused_ops.h): the f32 result is rounded
// to it once, as a cast would round it, and its gradient is read from it.
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
  // Fused residual add (kernels/ops/fused_ops.cpp; math in kernels/common/fused.h), layer_norm's geometry only
  // (g.groups == g.inner == 1): s = x + r and y = the normalised, affine-transformed s, one pass per row; x, r and
  // s are (g.rows, g.row_size) of one floating dtype, y likewise (or f16/bf16 for f32 x, as above); mean, rstd,
  // weight and bias as for norm_fwd. Where y is f16/bf16 for f32 x, r may be in y's dtype too (a half sublayer
  // output joining the f32 residual stream, read as a cast to f32 would widen it; kernels/common/norm_out.h).
  // Dispatch dtype: x's (floating).
  Kernel<void(const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
              const Tensor& r, const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps)>
      residual_norm_fwd;
  // grad_s = norm_bwd's dx of grad_y (from s and the saved statistics) + grad_s_other (the gradient of s's other
  // uses; undefined: none), summed before one rounding, one pass per row; all (g.rows, g.row_size) in s's dtype
  // but grad_y, which is in y's. grad_r, for an r in y's half dtype (undefined otherwise), gets the same sums
  // rounded to that dtype: the gradient of r, which otherwise a cast of grad_s would make in a pass of its own.
  // The weight and bias gradients are norm_bwd's, run on s. Dispatch dtype: s's (floating).
  Kernel<void(const Tensor& grad_s, const Tensor& grad_r, const Tensor& grad_y, const Tensor& grad_s_other,
              const Tensor& s, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g)>
      residual_norm_bwd;
};

template <>
struct Family<NormKernels> {
  static constexpr const char* name = "norm";
  static constexpr std::tuple kernels{Named{&NormKernels::norm_fwd, "norm_fwd"},
                                      Named{&NormKernels::norm_bwd, "norm_bwd"},
                                      Named{&NormKernels::residual_norm_fwd, "residual_norm_fwd"},
                                      Named{&NormKernels::residual_norm_bwd, "residual_norm_bwd"}};
};

}  // namespace volt::backend
