#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

/// Square-window pooling over NCHW input; stride 0 means stride = kernel_size.
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding;
};

}  // namespace volt::nn
