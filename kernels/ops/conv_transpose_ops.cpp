// conv1d (conv2d over a unit height dim) and conv_transpose2d (the conv backend's data-gradient kernel as a
// forward), with grouped forms built by splitting channels.
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/layer_ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/derivatives.h>

namespace volt {

namespace {

using Pair = std::pair<int64_t, int64_t>;

std::string shape_or_undefined(const Tensor& t) { return t.defined() ? t.shape_str() : std::string("undefined"); }

void check_like_x(const Tensor& x, const Tensor& t, const char* op, const char* name) {
  VOLT_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device().str(), " but x is on ", x.device().str(),
             "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(t.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()), " but x has ",
             dtype_name(x.dtype()), "; expected the same floating dtype");
}

// Runs f(x_g, weight_g, g) on each group's channels of x (dim 1) and weight (dim 0) and concatenates the outputs
// along dim 1.
template <class F>
Tensor per_group(const Tensor& x, const Tensor& weight, int64_t groups, F&& f) {
  if (groups == 1) return f(x, weight, int64_t{0});
  const int64_t cx = x.size(1) / groups, cw = weight.size(0) / groups;
  std::vector<Tensor> outs;
  outs.reserve(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g)
    outs.push_back(f(x.narrow(1, g * cx, cx), weight.narrow(0, g * cw, cw), g));
  return cat(outs, 1);
}

// The transposed convolution of one group, without bias: x (N, Cin, H, W), weight (Cin, Cout, kH, kW), both
// checked, floating, of one dtype and device.
Tensor conv_transpose2d_core(const Tensor& x, const Tensor& weight, const Conv2dParams& p, Pair output_padding) {
  if (backend::half_through_f32<&backend::ConvKernels::conv2d_backward>(x.device(), x.dtype()))
    return cast(conv_transpose2d_core(cast(x, DType::f32), cast(weight, DType::f32), p, output_padding), x.dtype());
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t cout = weight.size(1), kh = weight.size(2), kw = weight.size(3);
  const int64_t oh = (h - 1) * p.stride_h - 2 * p.pad_h + p.dil_h * (kh - 1) + output_padding.first + 1;
  const int64_t ow = (w - 1) * p.stride_w - 2 * p.pad_w + p.dil_w * (kw - 1) + output_padding.second + 1;
  // The conv2d taking an (oh, ow) image onto x's grid has (ch, cw) outputs: (h, w) plus, where output_padding is
  // at least the stride (allowed when it is below the dilation), a few more, whose zero "gradient" below
  // contributes nothing.
  const int64_t ch = (oh + 2 * p.pad_h - p.dil_h * (kh - 1) - 1) / p.stride_h + 1;
  const int64_t cw = (ow + 2 * p.pad_w - p.dil_w * (kw - 1) - 1) / p.stride_w + 1;
  // The transposed convolution is conv2d's input gradient with x as the upstream gradient: conv2d_data_grad,
  // differentiable to any order (its derivatives are conv2d and conv2d's weight gradient).
  Tensor xg = x;
  if (ch != h) xg = cat({xg, zeros({n, cin, ch - h, w}, x.dtype(), x.device())}, 2);
  if (cw != w) xg = cat({xg, zeros({n, cin, ch, cw - w}, x.dtype(), x.device())}, 3);
  Tensor out = conv2d_data_grad(xg, weight, {n, cout, oh, ow}, p);
  return out;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  trace::Range op_range(trace::Layer::op, "conv1d");
  const char* op = "conv1d";
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(weight.defined(), op, ": weight is undefined");
  if (x.dim() == 2) return conv1d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
  VOLT_CHECK(x.dim() == 3, op, ": expected x of shape (N, C_in, L) or (C_in, L) but got ", x.shape_str());
  check_like_x(x, weight, op, "weight");
  if (bias.defined()) check_like_x(x, bias, op, "bias");
  VOLT_CHECK(weight.dim() == 3, op, ": expected weight of shape (C_out, C_in / groups, K) but got ",
             weight.shape_str());
  VOLT_CHECK(groups > 0, op, ": groups (", groups, ") must be positive");
  VOLT_CHECK(x.size(1) == weight.size(1) * groups, op, ": x has shape ", x.shape_str(), " and weight has shape ",
             weight.shape_str(), " with groups=", groups, "; expected x.size(1) (", x.size(1),
             ") to equal weight.size(1) * groups (", weight.size(1) * groups, ")");
  VOLT_CHECK(weight.size(0) % groups == 0, op, ": weight has shape ", weight.shape_str(), "; expected out_channels (",
             weight.size(0), ") divisible by groups (", groups, ")");
  VOLT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), op, ": bias has shape ",
             shape_or_undefined(bias), "; expected ", shape_to_string({weight.size(0)}));
  VOLT_CHECK(stride > 0 && dilation > 0 && padding >= 0, op, ": expected stride > 0, padding >= 0, dilation > 0, got ",
             "stride=", stride, ", padding=", padding, ", dilation=", dilation);
  const int64_t span = dilation * (weight.size(2) - 1) + 1;
  VOLT_CHECK(x.size(2) + 2 * padding >= span, op, ": the input length (", x.size(2), ", padding ", padding,
             ") is smaller than the effective kernel length (", span,
             "); expected length + 2*padding >= dilation*(kernel-1)+1");
  const int64_t cout_g = weight.size(0) / groups;
  // The bias goes into conv2d (per group), which gives it the conv's dtype under autocast.
  auto conv = [&](const Tensor& xg, const Tensor& wg, int64_t g) {
    Tensor bg = !bias.defined() || groups == 1 ? bias : bias.narrow(0, g * cout_g, cout_g);
    return conv2d(xg, wg, bg, {1, stride}, {0, padding}, {1, dilation});
  };
  return per_group(x.unsqueeze(2), weight.unsqueeze(2), groups, conv).squeeze(2);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  trace::Range op_range(trace::Layer::op, "conv_transpose2d");
  if (autocast_detail::wants_lower(x) || autocast_detail::wants_lower(weight) || autocast_detail::wants_lower(bias))
    return conv_transpose2d(autocast_detail::lower(x), autocast_detail::lower(weight), autocast_detail::lower(bias),
                            stride, padding, output_padding, groups, dilation);
  const char* op = "conv_transpose2d";
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(weight.defined(), op, ": weight is undefined");
  if (x.dim() == 3)
    return conv_transpose2d(x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        .squeeze(0);
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
  check_like_x(x, weight, op, "weight");
  if (bias.defined()) check_like_x(x, bias, op, "bias");
  VOLT_CHECK(x.dim() == 4, op, ": expected x of shape (N, C_in, H, W) or (C_in, H, W) but got ", x.shape_str());
  VOLT_CHECK(weight.dim() == 4, op, ": expected weight of shape (C_in, C_out / groups, kH, kW) but got ",
             weight.shape_str());
  VOLT_CHECK(groups > 0, op, ": groups (", groups, ") must be positive");
  VOLT_CHECK(x.size(1) == weight.size(0), op, ": x has shape ", x.shape_str(), " and weight has shape ",
             weight.shape_str(), "; expected x.size(1) (", x.size(1), ") to equal weight.size(0) (", weight.size(0),
             ")");
  VOLT_CHECK(x.size(1) % groups == 0, op, ": in_channels (", x.size(1), ") must be divisible by groups (", groups,
             ")");
  const int64_t cout = weight.size(1) * groups;
  VOLT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == cout), op, ": bias has shape ",
             shape_or_undefined(bias), "; expected ", shape_to_string({cout}), " (weight.size(1) * groups)");
  VOLT_CHECK(stride.first > 0 && stride.second > 0, op, ": stride (", stride.first, ", ", stride.second,
             ") must be positive");
  VOLT_CHECK(dilation.first > 0 && dilation.second > 0, op, ": dilation (", dilation.first, ", ", dilation.second,
             ") must be positive");
  VOLT_CHECK(padding.first >= 0 && padding.second >= 0, op, ": padding (", padding.first, ", ", padding.second,
             ") must be >= 0");
  VOLT_CHECK(output_padding.first >= 0 && output_padding.second >= 0 &&
                 (output_padding.first < stride.first || output_padding.first < dilation.first) &&
                 (output_padding.second < stride.second || output_padding.second < dilation.second),
             op, ": output_padding (", output_padding.first, ", ", output_padding.second,
             ") must be >= 0 and smaller than either the stride (", stride.first, ", ", stride.second,
             ") or the dilation (", dilation.first, ", ", dilation.second, ") of its axis");
  const Conv2dParams p{stride.first, stride.second, padding.first, padding.second, dilation.first, dilation.second};
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t in = x.size(2 + axis), k = weight.size(2 + axis);
    const int64_t s = axis == 0 ? p.stride_h : p.stride_w, pad = axis == 0 ? p.pad_h : p.pad_w;
    const int64_t d = axis == 0 ? p.dil_h : p.dil_w;
    const int64_t opad = axis == 0 ? output_padding.first : output_padding.second;
    const int64_t o = (in - 1) * s - 2 * pad + d * (k - 1) + opad + 1;
    VOLT_CHECK(in > 0 && o > 0, op, ": x has shape ", x.shape_str(), " and weight ", weight.shape_str(),
               ", which gives an output ", axis == 0 ? "height" : "width", " of ", o,
               " = (in - 1)*stride - 2*padding + dilation*(kernel - 1) + output_padding + 1; expected it positive "
               "(reduce the padding)");
  }
  Tensor out = per_group(x, weight, groups, [&](const Tensor& xg, const Tensor& wg, int64_t) {
    return conv_transpose2d_core(xg, wg, p, output_padding);
  });
  if (bias.defined()) out = add(out, bias.reshape({1, cout, 1, 1}));
  return out;
}

}  // namespace volt
