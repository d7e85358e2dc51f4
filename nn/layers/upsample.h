#pragma once
#include <volt/kernels/layer_ops.h>
#include <volt/nn/module.h>

namespace volt::nn {

using UpsampleOptions = InterpolateOptions;

/// Resizes (N, C, H, W) input by volt::interpolate with fixed options, e.g.
///   Upsample({.scale_factor = {2.0}})                                          // nearest, 2x
///   Upsample({.size = {32, 48}, .mode = InterpolateMode::Bilinear, .align_corners = true})
/// The options are checked when the layer is built (exactly one of size and scale_factor; align_corners only
/// with bilinear), the input's shape when it runs.
class Upsample : public UnaryModule {
 public:
  explicit Upsample(UpsampleOptions options);
  Tensor forward(const Tensor& x) override { return interpolate(x, options); }
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  UpsampleOptions options;
};

}  // namespace volt::nn
