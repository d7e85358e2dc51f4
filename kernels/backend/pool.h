#pragma once
// 2-D max and average pooling (kernels/ops/conv_ops.cpp; kernels/cpu/pool.cpp; kernels/cuda/pool.cu:
// cuDNN). NCHW, every tensor contiguous. The CPU takes f32/f64 (the op computes f16/bf16 in f32); CUDA every
// floating dtype.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt {

struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

}  // namespace volt

namespace volt::backend {

struct PoolKernels {
  // indices (i64, out's shape): flat h*W+w of each max; the CPU fills it, CUDA leaves it undefined (cuDNN's
  // backward recomputes the argmax from x and out). NaN propagates. Dispatch dtype: x's.
  Kernel<void(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p)> max_pool2d_forward;
  // x and out: saved on CUDA (cuDNN's backward signature takes them), undefined on the CPU; indices the other way
  // round. Dispatch dtype: grad_x's.
  Kernel<void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
              const Tensor& indices, const Pool2dParams& p)>
      max_pool2d_backward;
  // Averages count padding (PyTorch's count_include_pad=True default). Dispatch dtype: x's.
  Kernel<void(const Tensor& out, const Tensor& x, const Pool2dParams& p)> avg_pool2d_forward;
  // x and out: saved on CUDA, undefined on the CPU. Dispatch dtype: grad_x's.
  Kernel<void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
              const Pool2dParams& p)>
      avg_pool2d_backward;
};

template <>
struct Family<PoolKernels> {
  static constexpr const char* name = "pool";
  static constexpr std::tuple kernels{Named{&PoolKernels::max_pool2d_forward, "max_pool2d_forward"},
                                      Named{&PoolKernels::max_pool2d_backward, "max_pool2d_backward"},
                                      Named{&PoolKernels::avg_pool2d_forward, "avg_pool2d_forward"},
                                      Named{&PoolKernels::avg_pool2d_backward, "avg_pool2d_backward"}};
};

}  // namespace volt::backend
