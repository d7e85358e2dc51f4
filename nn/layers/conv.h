#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

/// 2-D convolution over NCHW input: x (N, in, H, W) -> (N, out, H', W') with square kernel/stride/padding.
/// Init as PyTorch: weight kaiming_uniform(a = sqrt(5)) i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
/// fan_in = in * k * k, bias the same.
class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, int64_t dilation = 1);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation;
  Tensor weight;  ///< (out_channels, in_channels, kernel_size, kernel_size)
  Tensor bias;    ///< (out_channels), undefined without bias
};

}  // namespace volt::nn
