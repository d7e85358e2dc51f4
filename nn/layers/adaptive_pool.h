#pragma once
#include <volt/kernels/layer_ops.h>
#include <volt/nn/module.h>

namespace volt::nn {

/// Average pooling to a fixed output size (PyTorch's bins): (N, C, H, W) or (C, H, W) -> (..., OH, OW) for any
/// input size, e.g. AdaptiveAvgPool2d(1) for global average pooling. See volt::adaptive_avg_pool2d.
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(std::pair{output_size, output_size}) {}
  explicit AdaptiveAvgPool2d(std::pair<int64_t, int64_t> output_size);
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  std::pair<int64_t, int64_t> output_size;
};

}  // namespace volt::nn
