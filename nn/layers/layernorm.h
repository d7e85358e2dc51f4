#pragma once
#include <volt/nn/module.h>

namespace volt::nn {

/// Layer normalisation over the trailing dims given by normalized_shape: input (..., *normalized_shape), output
/// of the same shape (layer_norm in kernels/ops.h). With elementwise_affine, parameters weight = 1 and (when
/// with_bias) bias = 0, both of shape normalized_shape; otherwise neither exists.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool with_bias = true);
  /// LayerNorm(d) = LayerNorm({d}). (Other options take the Shape form: with more arguments, an integer overload
  /// would make LayerNorm({3, 4}) ambiguous with LayerNorm(3, 4.0).)
  explicit LayerNorm(int64_t normalized_size) : LayerNorm(Shape{normalized_size}) {}
  Tensor forward(const Tensor& x) override;
  /// weight = 1, bias = 0.
  void reset_parameters();
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;  ///< normalized_shape, or undefined
};

}  // namespace volt::nn
