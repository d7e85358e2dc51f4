#pragma once
// softmax and log_softmax (kernels/ops/nn_ops.cpp; kernels/cpu/softmax.cpp, kernels/cuda/softmax.cu). The math
// is kernels/common/softmax.h. The fused softmax of attention is kernels/backend/attention.h.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct SoftmaxKernels {
  // out = softmax (or log_softmax when log) of in over the middle dim of the contiguous (outer, r, inner); out has
  // in's shape and dtype. Dispatch dtype: in's (floating).
  Kernel<void(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log)> softmax_fwd;
};

template <>
struct Family<SoftmaxKernels> {
  static constexpr const char* name = "softmax";
  static constexpr std::tuple kernels{Named{&SoftmaxKernels::softmax_fwd, "softmax_fwd"}};
};

}  // namespace volt::backend
