#pragma once
// Backend kernels of layer_norm and group_norm (kernels/ops/norm_ops.cpp). volt::cpu (kernels/cpu/norm.cpp) and
// volt::cuda (kernels/cuda/norm.cu) implement both functions; callers pick one with VOLT_DISPATCH_DEVICE after
// checking arguments.
//
// Contracts (checked by the ops, assumed here): x, out, grad_out and grad_x are contiguous (g.rows, g.row_size)
// tensors of one floating dtype T; mean and rstd are (g.rows) and weight, bias, grad_weight and grad_bias are
// (g.num_params()), all contiguous in the accumulation dtype (f64 for f64 x, f32 otherwise). weight and bias may
// be undefined (no affine transform: w = 1, b = 0); a gradient tensor that is undefined is not computed.
// g.rows >= 1 and g.row_size >= 1.
#include <volt/kernels/common/norm.h>
#include <volt/kernels/tensor.h>

namespace volt {

#define VOLT_NORM_BACKEND_DECLS                                                                             \
  /* out = (x - mean) * rstd * w + b per row; mean and rstd (biased variance + eps) are saved. */           \
  void norm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,                 \
                const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps);                   \
  /* grad_x, grad_weight (sum of dy * xhat) and grad_bias (sum of dy), from the saved statistics. */        \
  void norm_bwd(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,                   \
                const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,            \
                const Tensor& weight, const NormGeom& g);

namespace cpu { VOLT_NORM_BACKEND_DECLS }
namespace cuda { VOLT_NORM_BACKEND_DECLS }
#undef VOLT_NORM_BACKEND_DECLS

}  // namespace volt
