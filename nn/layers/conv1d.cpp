#include <volt/nn/layers/conv1d.h>

#include <cmath>

#include <volt/nn/init.h>

namespace volt::nn {

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d, int64_t g, bool with_bias)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p), dilation(d), groups(g) {
  VOLT_CHECK(in > 0 && out > 0 && k > 0, "Conv1d: in_channels, out_channels and kernel_size must be positive, got ",
             in, ", ", out, ", ", k);
  VOLT_CHECK(s > 0 && p >= 0 && d > 0 && g > 0, "Conv1d: expected stride > 0, padding >= 0, dilation > 0, groups > 0, ",
             "got stride=", s, ", padding=", p, ", dilation=", d, ", groups=", g);
  VOLT_CHECK(in % g == 0 && out % g == 0, "Conv1d: in_channels (", in, ") and out_channels (", out,
             ") must be divisible by groups (", g, ")");
  weight = register_parameter("weight", empty({out, in / g, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv1d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels / groups * kernel_size));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv1d::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3) && x.size(-2) == in_channels,
             "Conv1d::forward: expected input (N, ", in_channels, ", L) or (", in_channels, ", L), got ",
             x.defined() ? x.shape_str() : std::string("undefined"));
  return conv1d(x, weight, bias, stride, padding, dilation, groups);
}

std::string Conv1d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + std::to_string(kernel_size) + ", stride=" + std::to_string(stride);
  if (padding != 0) s += ", padding=" + std::to_string(padding);
  if (dilation != 1) s += ", dilation=" + std::to_string(dilation);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace volt::nn
