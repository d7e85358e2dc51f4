#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

struct LinearOptions {
  bool bias = true;
  /// Applied after the bias in the same fused op (kernels/ops.h: linear(x, w, b, act)); None: a plain Linear.
  Activation activation = Activation::None;
};

/// y = act(x @ weight^T + bias), for x (..., in_features) -> (..., out_features); act is the identity unless
/// LinearOptions::activation says otherwise, e.g. Linear(784, 128, {.activation = Activation::ReLU}) computes
/// what Linear(784, 128) followed by ReLU does, with the bias and the activation fused into the GEMM.
/// Parameters (weight, bias) and their names do not depend on the activation.
/// Init (PyTorch's): weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5)), bias the same.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Linear(int64_t in_features, int64_t out_features, LinearOptions options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Activation activation = Activation::None;
  Tensor weight;  ///< (out_features, in_features)
  Tensor bias;    ///< (out_features), undefined without bias
};

}  // namespace volt::nn
