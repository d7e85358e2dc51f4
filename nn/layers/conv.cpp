#include <volt/nn/layers/conv.h>

#include <cmath>

#include <volt/nn/init.h>

namespace volt::nn {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool with_bias, int64_t d)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p), dilation(d) {
  VOLT_CHECK(in > 0 && out > 0 && k > 0, "Conv2d: in_channels, out_channels and kernel_size must be positive, got ",
             in, ", ", out, ", ", k);
  VOLT_CHECK(s > 0 && p >= 0 && d > 0, "Conv2d: expected stride > 0, padding >= 0, dilation > 0, got stride=", s,
             ", padding=", p, ", dilation=", d);
  weight = register_parameter("weight", empty({out, in, k, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size * kernel_size));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_channels, "Conv2d::forward: expected input (N, ",
             in_channels, ", H, W), got ", x.defined() ? x.shape_str() : std::string("undefined"));
  return conv2d(x, weight, bias, {stride, stride}, {padding, padding}, {dilation, dilation});
}

std::string Conv2d::extra_repr() const {
  return std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", kernel_size=" +
         std::to_string(kernel_size) + ", stride=" + std::to_string(stride) + ", padding=" + std::to_string(padding);
}

}  // namespace volt::nn
