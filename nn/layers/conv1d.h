#pragma once
#include <volt/kernels/layer_ops.h>
#include <volt/nn/module.h>

namespace volt::nn {

/// 1-D convolution over (N, C_in, L) or unbatched (C_in, L) input -> (N, C_out, L_out), PyTorch's argument order
/// and init: weight (out, in / groups, kernel_size) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
/// fan_in = in / groups * kernel_size (kaiming_uniform, a = sqrt(5)), bias the same. See volt::conv1d.
class Conv1d : public UnaryModule {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation, groups;
  Tensor weight;  ///< (out_channels, in_channels / groups, kernel_size)
  Tensor bias;    ///< (out_channels), undefined without bias
};

}  // namespace volt::nn
