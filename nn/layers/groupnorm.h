#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

/// Group normalisation: input (N, C, *) with C = num_channels, split into num_groups groups of consecutive
/// channels, each normalised over its channels and spatial positions (group_norm in kernels/ops.h). With affine,
/// per-channel parameters weight (C) = 1 and bias (C) = 0.
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  /// weight = 1, bias = 0.
  void reset_parameters();
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;  ///< (C), or undefined
};

}  // namespace volt::nn
