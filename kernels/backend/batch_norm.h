#pragma once
// batch_norm (kernels/ops/conv_ops.cpp; kernels/cpu/batch_norm.cpp, cuDNN in kernels/cuda/batch_norm.cu).
// x and out are contiguous (N, C, S) (S = H * W, 1 for 2-D input); weight and bias (C) are always defined and in
// the parameter dtype (x's, f32 for half x on CUDA). Statistics accumulate in double on the CPU.
#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct BatchNormKernels {
  // Training: normalises with the batch statistics; save_mean/save_invstd (C) receive the batch mean and
  // 1/sqrt(biased var + eps); running stats (C), when defined, are updated in place:
  // r = (1 - momentum) r + momentum * stat (unbiased variance). Dispatch dtype: x's.
  Kernel<void(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
              const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
              double momentum, double eps)>
      batch_norm_forward_train;
  // Evaluation: normalises with the running statistics. Dispatch dtype: x's.
  Kernel<void(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Tensor& running_mean, const Tensor& running_var, double eps)>
      batch_norm_forward_eval;
  // Training-mode backward from the saved batch statistics; writes the gradients whose tensors are defined.
  // Dispatch dtype: x's.
  Kernel<void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
              const Tensor& x, const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, double eps)>
      batch_norm_backward;
};

template <>
struct Family<BatchNormKernels> {
  static constexpr const char* name = "batch_norm";
  static constexpr std::tuple kernels{
      Named{&BatchNormKernels::batch_norm_forward_train, "batch_norm_forward_train"},
      Named{&BatchNormKernels::batch_norm_forward_eval, "batch_norm_forward_eval"},
      Named{&BatchNormKernels::batch_norm_backward, "batch_norm_backward"}};
};

}  // namespace volt::backend
