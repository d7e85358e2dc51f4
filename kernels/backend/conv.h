#pragma once
// 2-D convolution (kernels/ops/conv_ops.cpp; kernels/cpu/conv.cpp: im2col + GEMM; kernels/cuda/conv.cu:
// cuDNN). NCHW, every tensor contiguous and of one dtype. The CPU takes f32/f64 (the op computes f16/bf16 in
// f32); CUDA every floating dtype.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
};

}  // namespace volt

namespace volt::backend {

struct ConvKernels {
  // x (N, C, H, W), weight (OC, C, KH, KW), bias (OC) or undefined -> out (N, OC, OH, OW). Dispatch dtype: x's.
  Kernel<void(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p)>
      conv2d_forward;
  // Writes the gradients whose tensors are defined (the bias gradient is a reduction the op computes itself).
  // Dispatch dtype: x's.
  Kernel<void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
              const Tensor& weight, const Conv2dParams& p)>
      conv2d_backward;
};

template <>
struct Family<ConvKernels> {
  static constexpr const char* name = "conv";
  static constexpr std::tuple kernels{Named{&ConvKernels::conv2d_forward, "conv2d_forward"},
                                      Named{&ConvKernels::conv2d_backward, "conv2d_backward"}};
};

}  // namespace volt::backend
