#include <volt/nn/layers/linear.h>

#include <cmath>

#include <volt/nn/init.h>

namespace volt::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : Linear(in, out, LinearOptions{.bias = with_bias}) {}

Linear::Linear(int64_t in, int64_t out, LinearOptions options)
    : in_features(in), out_features(out), activation(options.activation) {
  VOLT_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got in_features=", in,
             ", out_features=", out);
  weight = register_parameter("weight", empty({out, in}));
  if (options.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features, "Linear::forward: input of shape ",
             x.defined() ? x.shape_str() : std::string("undefined"), " must end in in_features=", in_features);
  return linear(x, weight, bias, activation);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "true" : "false") +
         (activation == Activation::None ? "" : std::string(", activation=") + activation_name(activation));
}

}  // namespace volt::nn
