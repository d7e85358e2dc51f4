#include <volt/nn/layers/conv_transpose.h>

#include <cmath>

#include <volt/nn/init.h>

namespace volt::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t op, int64_t g,
                                 bool with_bias, int64_t d)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p), output_padding(op), groups(g),
      dilation(d) {
  VOLT_CHECK(in > 0 && out > 0 && k > 0,
             "ConvTranspose2d: in_channels, out_channels and kernel_size must be positive, got ", in, ", ", out, ", ", k);
  VOLT_CHECK(s > 0 && p >= 0 && d > 0 && g > 0, "ConvTranspose2d: expected stride > 0, padding >= 0, dilation > 0, ",
             "groups > 0, got stride=", s, ", padding=", p, ", dilation=", d, ", groups=", g);
  VOLT_CHECK(in % g == 0 && out % g == 0, "ConvTranspose2d: in_channels (", in, ") and out_channels (", out,
             ") must be divisible by groups (", g, ")");
  VOLT_CHECK(op >= 0 && (op < s || op < d), "ConvTranspose2d: output_padding (", op,
             ") must be >= 0 and smaller than either stride (", s, ") or dilation (", d, ")");
  weight = register_parameter("weight", empty({in, out / g, k, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(out_channels / groups * kernel_size * kernel_size));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4) && x.size(-3) == in_channels,
             "ConvTranspose2d::forward: expected input (N, ", in_channels, ", H, W) or (", in_channels,
             ", H, W), got ", x.defined() ? x.shape_str() : std::string("undefined"));
  return conv_transpose2d(x, weight, bias, {stride, stride}, {padding, padding}, {output_padding, output_padding},
                          groups, {dilation, dilation});
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + std::to_string(kernel_size) + ", stride=" + std::to_string(stride);
  if (padding != 0) s += ", padding=" + std::to_string(padding);
  if (output_padding != 0) s += ", output_padding=" + std::to_string(output_padding);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (dilation != 1) s += ", dilation=" + std::to_string(dilation);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace volt::nn
