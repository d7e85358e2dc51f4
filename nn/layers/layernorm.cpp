#include <volt/nn/layers/layernorm.h>

#include <sstream>

#include <volt/nn/init.h>

namespace volt::nn {

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine, bool with_bias)
    : normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  VOLT_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape is empty; expected the sizes of the trailing dims "
             "to normalise over");
  for (int64_t s : normalized_shape)
    VOLT_CHECK(s > 0, "LayerNorm: normalized_shape ", shape_to_string(normalized_shape),
               " has a non-positive size; expected positive sizes");
  VOLT_CHECK(eps >= 0.0, "LayerNorm: eps must be non-negative, got ", eps);
  if (affine) {
    weight = register_parameter("weight", empty(normalized_shape));
    if (with_bias) bias = register_parameter("bias", empty(normalized_shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_to_string(normalized_shape) << ", eps=" << eps
     << ", elementwise_affine=" << (elementwise_affine ? "true" : "false");
  if (elementwise_affine && !bias.defined()) os << ", bias=false";
  return os.str();
}

}  // namespace volt::nn
