#pragma once
// Dropout (kernels/ops/nn_ops.cpp; kernels/cpu/dropout.cpp, kernels/cuda/dropout.cu). Masks come from Philox
// (nnmath::dropout_keep in kernels/common/softmax.h), bit-identical on both backends. Tensors are contiguous.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/philox_args.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct DropoutKernels {
  // out = in * keep / (1 - p), mask (bool) = keep, keep_i = Philox uniform(rng.key(), rng.first(), i) >= p.
  // Dispatch dtype: in's (floating).
  Kernel<void(const Tensor& out, const Tensor& mask, const Tensor& in, PhiloxArgs rng, double p)>
      dropout_fwd;
  // grad_in = mask ? grad_out * scale : 0. Dispatch dtype: grad_out's (floating).
  Kernel<void(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale)> dropout_bwd;
};

template <>
struct Family<DropoutKernels> {
  static constexpr const char* name = "dropout";
  static constexpr std::tuple kernels{Named{&DropoutKernels::dropout_fwd, "dropout_fwd"},
                                      Named{&DropoutKernels::dropout_bwd, "dropout_bwd"}};
};

}  // namespace volt::backend
