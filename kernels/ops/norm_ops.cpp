// layer_norm and group_norm: argument checks, layout (NormGeom) and the autograd formula. Both run the same
// backend kernels (kernels/backend/norm.h); only the geometry differs.
#include <string>

#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/norm_out_op.h>

namespace volt {

namespace {

// Statistics and parameters are computed in this dtype.
DType stat_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

void check_x(const Tensor& x, const char* op) {
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
}

void check_param(const Tensor& t, const Tensor& x, const Shape& shape, const char* op, const char* name,
                 const std::string& what) {
  if (!t.defined()) return;
  VOLT_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device().str(), " but x is on ", x.device().str(),
             "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(t.shape() == shape, op, ": ", name, " has shape ", t.shape_str(), " but x of shape ", x.shape_str(),
             " needs ", shape_to_string(shape), " (", what, ")");
  const DType pdt = stat_dtype(x.dtype());
  VOLT_CHECK(t.dtype() == x.dtype() || t.dtype() == pdt, op, ": ", name, " has dtype ", dtype_name(t.dtype()),
             " but x has ", dtype_name(x.dtype()), "; expected ", dtype_name(x.dtype()),
             pdt != x.dtype() ? " or " + std::string(dtype_name(pdt)) : std::string());
}

// The normalisation in differentiable ops (the backward under create_graph differentiates this): each of g.rows
// rows of g.row_size values is normalised with its biased variance, then scaled and shifted by weight and bias
// (per channel for group_norm, over the trailing normalized_shape for layer_norm).
Tensor norm_composed(const Tensor& x, const NormGeom& g, const Tensor& weight, const Tensor& bias, double eps,
                     bool per_channel) {
  const DType pdt = stat_dtype(x.dtype());
  Tensor rows = x.to(pdt).reshape({g.rows, g.row_size});
  Tensor centered = sub(rows, mean(rows, {1}, /*keepdim=*/true));
  Tensor normed = div(centered, sqrt(add(mean(square(centered), {1}, /*keepdim=*/true), eps))).reshape(x.shape());
  auto affine_shape = [&](const Tensor& p) {
    if (!per_channel) return p;
    Shape s{p.numel()};
    for (int64_t i = 2; i < x.dim(); ++i) s.push_back(1);
    return p.reshape(s);
  };
  if (weight.defined()) normed = mul(normed, affine_shape(weight.to(pdt)));
  if (bias.defined()) normed = add(normed, affine_shape(bias.to(pdt)));
  return normed.to(x.dtype());
}

// Runs the normalisation described by `g` on checked arguments and attaches the backward. The output is in
// out_dt: x's dtype, or f16/bf16 for f32 x (kernels/common/norm_out.h), and its gradient is taken in that dtype.
Tensor norm_impl(const Tensor& x, const NormGeom& g, const Tensor& weight, const Tensor& bias, double eps,
                 const char* backward_name, DType out_dt) {
  const DType pdt = stat_dtype(x.dtype());
  const Device dev = x.device();
  Tensor xc = x.detach().contiguous();
  Tensor w = weight.defined() ? weight.detach().to(pdt).contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().to(pdt).contiguous() : Tensor();
  Tensor out = empty(xc.shape(), out_dt, dev);
  Tensor mean = empty({g.rows}, pdt, dev), rstd = empty({g.rows}, pdt, dev);
  const bool any = xc.numel() > 0;
  if (any) backend::call<&backend::NormKernels::norm_fwd>(dev, xc.dtype(), out, mean, rstd, xc, w, b, g, eps);
  const bool gx = x.requires_grad();
  const bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  const DType weight_dt = weight.defined() ? weight.dtype() : pdt, bias_dt = bias.defined() ? bias.dtype() : pdt;
  const Shape wshape = weight.defined() ? weight.shape() : Shape{}, bshape = bias.defined() ? bias.shape() : Shape{};
  const bool per_channel = std::string(backward_name) == "GroupNormBackward";
  autograd::attach_differentiable(out, backward_name, {x, weight, bias}, [=](const std::vector<Tensor>& grads) {
    if (autograd::create_graph_enabled())
      return autograd::composite_backward({x, weight, bias}, grads, [g, eps, per_channel, out_dt](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{norm_composed(in[0], g, in[1], in[2], eps, per_channel).to(out_dt)};
      });
    Tensor dx = gx ? empty(xc.shape(), xc.dtype(), dev) : Tensor();
    Tensor dw = gw ? empty({w.numel()}, pdt, dev) : Tensor();
    Tensor db = gb ? empty({b.numel()}, pdt, dev) : Tensor();
    if (any) {
      Tensor dy = grads[0].dtype() == out_dt ? grads[0].contiguous() : grads[0].to(out_dt).contiguous();
      backend::call<&backend::NormKernels::norm_bwd>(dev, xc.dtype(), dx, dw, db, dy, xc, mean, rstd, w, g);
    } else {  // nothing to normalise: zero gradients of the right shapes
      for (Tensor* t : {&dx, &dw, &db})
        if (t->defined()) t->zero_();
    }
    if (dw.defined()) dw = dw.reshape(wshape).to(weight_dt);
    if (db.defined()) db = db.reshape(bshape).to(bias_dt);
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

void check_eps(double eps, const char* op) {
  VOLT_CHECK(eps >= 0.0, op, ": eps must be non-negative, got ", eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  trace::Range op_range(trace::Layer::op, "layer_norm");
  check_x(x, "layer_norm");  // before x.dtype() below
  if (autocast_detail::wants_fp32(x))  // statistics and normalisation in fp32
    return layer_norm(autocast_detail::fp32(x), normalized_shape, autocast_detail::fp32(weight),
                      autocast_detail::fp32(bias), eps);
  return norm_detail::layer_norm_to(x, normalized_shape, weight, bias, eps, x.dtype());
}

Tensor norm_detail::layer_norm_to(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                  const Tensor& bias, double eps, DType out_dtype) {
  const char* op = "layer_norm";
  check_x(x, op);
  VOLT_CHECK(out_dtype == x.dtype() || (x.dtype() == DType::f32 && (out_dtype == DType::f16 || out_dtype == DType::bf16)),
             op, ": output dtype ", dtype_name(out_dtype), " for x of dtype ", dtype_name(x.dtype()),
             "; expected x's dtype (or float16 or bfloat16 for float32 x)");
  check_eps(eps, op);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  VOLT_CHECK(k >= 1, op, ": normalized_shape is empty; expected the sizes of x's trailing dims to normalise over");
  bool trailing_match = x.dim() >= k;
  for (int64_t i = 0; trailing_match && i < k; ++i) trailing_match = x.size(x.dim() - k + i) == normalized_shape[i];
  VOLT_CHECK(trailing_match, op, ": x has shape ", x.shape_str(), " but normalized_shape is ",
             shape_to_string(normalized_shape), "; expected x's last ", k, " dim", k == 1 ? "" : "s", " to equal ",
             "normalized_shape");
  check_param(weight, x, normalized_shape, op, "weight", "normalized_shape");
  check_param(bias, x, normalized_shape, op, "bias", "normalized_shape");
  NormGeom g;
  g.row_size = shape_numel(normalized_shape);
  g.rows = g.row_size > 0 ? x.numel() / g.row_size : shape_numel(Shape(x.shape().begin(), x.shape().end() - k));
  g.groups = 1;
  g.inner = 1;
  return norm_impl(x, g, weight, bias, eps, "LayerNormBackward", out_dtype);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  trace::Range op_range(trace::Layer::op, "group_norm");
  const char* op = "group_norm";
  check_x(x, op);
  if (autocast_detail::wants_fp32(x))
    return group_norm(autocast_detail::fp32(x), num_groups, autocast_detail::fp32(weight),
                      autocast_detail::fp32(bias), eps);
  check_eps(eps, op);
  VOLT_CHECK(x.dim() >= 2, op, ": expected x of shape (N, C, *) but got ", x.shape_str());
  VOLT_CHECK(num_groups >= 1, op, ": num_groups must be positive, got ", num_groups);
  const int64_t N = x.size(0), C = x.size(1);
  VOLT_CHECK(C % num_groups == 0, op, ": the number of channels (", C, ", dim 1 of x of shape ", x.shape_str(),
             ") must be divisible by num_groups (", num_groups, ")");
  const std::string per_channel = "one value per channel, C = " + std::to_string(C);
  check_param(weight, x, {C}, op, "weight", per_channel);
  check_param(bias, x, {C}, op, "bias", per_channel);
  const int64_t S = shape_numel(Shape(x.shape().begin() + 2, x.shape().end()));
  NormGeom g;
  g.rows = N * num_groups;
  g.row_size = (C / num_groups) * S;
  g.groups = num_groups;
  g.inner = S;
  // An empty spatial extent leaves no rows to normalise; keep the geometry's divisions well defined.
  if (S == 0) g.inner = 1;
  return norm_impl(x, g, weight, bias, eps, "GroupNormBackward", x.dtype());
}

}  // namespace volt
