#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

/// y = x @ weight^T + bias, for x (..., in_features) -> (..., out_features).
/// Init (PyTorch's): weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5)), bias the same.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight;  ///< (out_features, in_features)
  Tensor bias;    ///< (out_features), undefined without bias
};

}  // namespace volt::nn
