#pragma once
#include <volt/kernels/layer_ops.h>
#include <volt/nn/module.h>

namespace volt::nn {

/// Transposed 2-D convolution ("deconvolution") over (N, C_in, H, W) or (C_in, H, W) input with a square kernel,
/// PyTorch's argument order, parameter names and init: weight (in, out / groups, k, k) and bias (out), both
/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = out / groups * k * k (PyTorch reads it from weight dim 1).
/// Output H_out = (H - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1. See volt::conv_transpose2d.
class ConvTranspose2d : public UnaryModule {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, bool bias = true,
                  int64_t dilation = 1);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, dilation;
  Tensor weight;  ///< (in_channels, out_channels / groups, kernel_size, kernel_size)
  Tensor bias;    ///< (out_channels), undefined without bias
};

}  // namespace volt::nn
