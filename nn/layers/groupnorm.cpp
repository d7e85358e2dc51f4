#include <volt/nn/layers/groupnorm.h>

#include <sstream>

#include <volt/nn/init.h>

namespace volt::nn {

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine_)
    : num_groups(groups), num_channels(channels), eps(eps_), affine(affine_) {
  VOLT_CHECK(groups > 0, "GroupNorm: num_groups must be positive, got ", groups);
  VOLT_CHECK(channels > 0, "GroupNorm: num_channels must be positive, got ", channels);
  VOLT_CHECK(channels % groups == 0, "GroupNorm: num_channels (", channels, ") must be divisible by num_groups (",
             groups, ")");
  VOLT_CHECK(eps >= 0.0, "GroupNorm: eps must be non-negative, got ", eps);
  if (affine) {
    weight = register_parameter("weight", empty({channels}));
    bias = register_parameter("bias", empty({channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_channels, "GroupNorm::forward: expected input (N, ",
             num_channels, ", *) with ", num_channels, " channels in dim 1, got ",
             x.defined() ? x.shape_str() : std::string("undefined"));
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << num_groups << ", " << num_channels << ", eps=" << eps << ", affine=" << (affine ? "true" : "false");
  return os.str();
}

}  // namespace volt::nn
