// conv2d, max/avg pooling and batch norm: argument checks, layout, and autograd formulas. Where the backend has no
// f16/bf16 kernel (the CPU), the op computes half inputs in f32 (a differentiable cast around the f32 op); CUDA runs
// them natively through cuDNN.
#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/derivatives.h>
#include <volt/kernels/ops/autocast_util.h>

namespace volt {

namespace {

using Pair = std::pair<int64_t, int64_t>;

void check_operand(const Tensor& x, const Tensor& other, const char* op, const char* name) {
  VOLT_CHECK(other.defined(), op, ": ", name, " is undefined");
  VOLT_CHECK(other.device() == x.device(), op, ": ", name, " is on ", other.device().str(), " but x is on ",
             x.device().str(), "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(other.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(other.dtype()), " but x has ",
             dtype_name(x.dtype()), "; expected the same floating dtype");
}

void check_input(const Tensor& x, const char* op) {
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, const char* op, const char* axis) {
  const int64_t o = (in + 2 * p - d * (k - 1) - 1) / s + 1;
  VOLT_CHECK(in + 2 * p - d * (k - 1) - 1 >= 0 && o >= 1, op, ": the input ", axis, " (", in, ", padding ", p,
             ") is smaller than the effective kernel ", axis, " (", d * (k - 1) + 1, "); expected input + 2*padding >= ",
             "dilation*(kernel-1)+1");
  return o;
}

Pool2dParams pool_params(const Tensor& x, Pair kernel, Pair stride, Pair padding, const char* op) {
  VOLT_CHECK(x.dim() == 4, op, ": expected x of shape (N, C, H, W) but got ", x.shape_str());
  VOLT_CHECK(kernel.first > 0 && kernel.second > 0, op, ": kernel (", kernel.first, ", ", kernel.second,
             ") must be positive");
  if (stride.first == 0 && stride.second == 0) stride = kernel;
  VOLT_CHECK(stride.first > 0 && stride.second > 0, op, ": stride (", stride.first, ", ", stride.second,
             ") must be positive (or (0, 0) for stride = kernel)");
  VOLT_CHECK(padding.first >= 0 && padding.second >= 0 && 2 * padding.first <= kernel.first &&
                 2 * padding.second <= kernel.second,
             op, ": padding (", padding.first, ", ", padding.second, ") must be >= 0 and at most half the kernel (",
             kernel.first, ", ", kernel.second, ")");
  return {kernel.first, kernel.second, stride.first, stride.second, padding.first, padding.second};
}

Shape pool_out_shape(const Tensor& x, const Pool2dParams& p, const char* op) {
  return {x.size(0), x.size(1), out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, op, "height"),
          out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, op, "width")};
}

}  // namespace

// ---- conv2d -------------------------------------------------------------------------------------------------

// conv2d's two backward products as differentiable functions (kernels/ops/derivatives.h). With y = conv2d(x, w):
// data_grad(g, w) = dL/dx and weight_grad(x, g) = dL/dw. Both are bilinear; each one's derivatives are the
// other two products, so they differentiate to any order:
//   data_grad(g, w):   d/dg = conv2d(., w),       d/dw = weight_grad(., g)
//   weight_grad(x, g): d/dx = data_grad(g, .),    d/dg = conv2d(x, .)
namespace {
Tensor conv2d_params(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  return conv2d(x, w, Tensor(), {p.stride_h, p.stride_w}, {p.pad_h, p.pad_w}, {p.dil_h, p.dil_w});
}
}  // namespace

Tensor conv2d_data_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  Tensor gd = g.detach().contiguous(), wd = w.detach().contiguous();
  Tensor dx = empty(x_shape, gd.dtype(), gd.device());
  // The kernel reads its `x` argument only for the data gradient's geometry: the output tensor serves.
  backend::call<&backend::ConvKernels::conv2d_backward>(gd.device(), gd.dtype(), dx, Tensor(), gd, dx, wd, p);
  autograd::attach_differentiable(dx, "Conv2dDataGradBackward", {g, w}, [g, w, p](const std::vector<Tensor>& gg) {
    return std::vector<Tensor>{g.requires_grad() ? conv2d_params(gg[0], w, p) : Tensor(),
                               w.requires_grad() ? conv2d_weight_grad(gg[0], g, w.shape(), p) : Tensor()};
  });
  return dx;
}

Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& w_shape, const Conv2dParams& p) {
  Tensor gd = g.detach().contiguous(), xd = x.detach().contiguous();
  Tensor dw = empty(w_shape, xd.dtype(), xd.device());
  // The kernel reads its `weight` argument only for the weight gradient's geometry (a small scratch tensor).
  Tensor w_like = empty(w_shape, xd.dtype(), xd.device());
  backend::call<&backend::ConvKernels::conv2d_backward>(gd.device(), xd.dtype(), Tensor(), dw, gd, xd, w_like, p);
  autograd::attach_differentiable(dw, "Conv2dWeightGradBackward", {x, g}, [x, g, p](const std::vector<Tensor>& gg) {
    return std::vector<Tensor>{x.requires_grad() ? conv2d_data_grad(g, gg[0], x.shape(), p) : Tensor(),
                               g.requires_grad() ? conv2d_params(x, gg[0], p) : Tensor()};
  });
  return dw;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation) {
  trace::Range op_range(trace::Layer::op, "conv2d");
  if (autocast_detail::wants_lower(x) || autocast_detail::wants_lower(weight) || autocast_detail::wants_lower(bias))
    return conv2d(autocast_detail::lower(x), autocast_detail::lower(weight), autocast_detail::lower(bias), stride,
                  padding, dilation);
  const char* op = "conv2d";
  check_input(x, op);
  check_operand(x, weight, op, "weight");
  if (bias.defined()) check_operand(x, bias, op, "bias");
  VOLT_CHECK(x.dim() == 4, "conv2d: expected x of shape (N, C, H, W) but got ", x.shape_str());
  VOLT_CHECK(weight.dim() == 4, "conv2d: expected weight of shape (out_channels, in_channels, kH, kW) but got ",
             weight.shape_str());
  VOLT_CHECK(x.size(1) == weight.size(1), "conv2d: x has shape ", x.shape_str(), " and weight has shape ",
             weight.shape_str(), "; expected x.size(1) (", x.size(1), ") to equal weight.size(1) (", weight.size(1),
             ")");
  VOLT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "conv2d: bias has shape ",
             bias.defined() ? bias.shape_str() : "", "; expected ", shape_to_string({weight.size(0)}));
  VOLT_CHECK(stride.first > 0 && stride.second > 0, "conv2d: stride (", stride.first, ", ", stride.second,
             ") must be positive");
  VOLT_CHECK(dilation.first > 0 && dilation.second > 0, "conv2d: dilation (", dilation.first, ", ", dilation.second,
             ") must be positive");
  VOLT_CHECK(padding.first >= 0 && padding.second >= 0, "conv2d: padding (", padding.first, ", ", padding.second,
             ") must be >= 0");
  if (backend::half_through_f32<&backend::ConvKernels::conv2d_forward>(x.device(), x.dtype())) {
    AutocastGuard exact(false);  // the fp32 computation of a half conv must not be lowered again
    Tensor b32 = bias.defined() ? cast(bias, DType::f32) : Tensor();
    return cast(conv2d(cast(x, DType::f32), cast(weight, DType::f32), b32, stride, padding, dilation), x.dtype());
  }
  Conv2dParams p{stride.first, stride.second, padding.first, padding.second, dilation.first, dilation.second};
  const int64_t oh = out_size(x.size(2), weight.size(2), p.stride_h, p.pad_h, p.dil_h, op, "height");
  const int64_t ow = out_size(x.size(3), weight.size(3), p.stride_w, p.pad_w, p.dil_w, op, "width");
  Tensor xc = x.detach().contiguous(), wc = weight.detach().contiguous();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty({x.size(0), weight.size(0), oh, ow}, x.dtype(), x.device());
  // Multiply-adds x2 of one pass; the backward's data and weight gradients cost one pass each.
  const uint64_t conv_flops = static_cast<uint64_t>(2 * out.numel() * weight.size(1) * weight.size(2) * weight.size(3));
  trace::count_flops(conv_flops);
  backend::call<&backend::ConvKernels::conv2d_forward>(x.device(), xc.dtype(), out, xc, wc, bc, p);
  const bool gx = x.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  autograd::attach_differentiable(out, "Conv2dBackward", {x, weight, bias}, [=](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) {
      trace::count_flops(conv_flops * (static_cast<uint64_t>(gx) + static_cast<uint64_t>(gw)));
      Tensor dx = gx ? conv2d_data_grad(g[0], weight, x.shape(), p) : Tensor();
      Tensor dw = gw ? conv2d_weight_grad(x, g[0], weight.shape(), p) : Tensor();
      Tensor db = gb ? sum(g[0], {0, 2, 3}).to(bias.dtype()) : Tensor();
      return std::vector<Tensor>{dx, dw, db};
    }
    Tensor go = g[0].contiguous();
    Tensor dx = gx ? empty(xc.shape(), xc.dtype(), xc.device()) : Tensor();
    Tensor dw = gw ? empty(wc.shape(), wc.dtype(), wc.device()) : Tensor();
    trace::count_flops(conv_flops * (static_cast<uint64_t>(gx) + static_cast<uint64_t>(gw)));
    backend::call<&backend::ConvKernels::conv2d_backward>(go.device(), xc.dtype(), dx, dw, go, xc, wc, p);
    // The bias gradient is a plain reduction over (N, H, W), done by Volt's own sum for every device and dtype
    // (cuDNN's backward-bias kernel rejects bf16 and is slow for small channel counts). fp32 accumulation.
    Tensor db = gb ? sum(go, {0, 2, 3}).to(bc.dtype()) : Tensor();
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

// ---- pooling ------------------------------------------------------------------------------------------------

Tensor max_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  trace::Range op_range(trace::Layer::op, "max_pool2d");
  check_input(x, "max_pool2d");
  if (x.dim() == 3) return max_pool2d(x.unsqueeze(0), kernel, stride, padding).squeeze(0);
  Pool2dParams p = pool_params(x, kernel, stride, padding, "max_pool2d");
  if (backend::half_through_f32<&backend::PoolKernels::max_pool2d_forward>(x.device(), x.dtype()))
    return cast(max_pool2d(cast(x, DType::f32), kernel, stride, padding), x.dtype());
  Tensor xc = x.detach().contiguous();
  Tensor out = empty(pool_out_shape(xc, p, "max_pool2d"), xc.dtype(), xc.device());
  // The CPU records argmax positions; cuDNN's backward recomputes them from x and out instead.
  Tensor idx = x.is_cuda() ? Tensor() : empty(out.shape(), DType::i64, kCPU);
  backend::call<&backend::PoolKernels::max_pool2d_forward>(x.device(), xc.dtype(), out, idx, xc, p);
  Tensor so = x.is_cuda() ? out.detach() : Tensor(), sx = x.is_cuda() ? xc : Tensor();
  Shape xs = xc.shape();
  // The backward routes each output's gradient to its window's argmax: linear in the gradient, with the adjoint
  // picking the gradient's values at the same positions. The CPU keeps those positions, so under create_graph
  // the backward differentiates to that selection; on CUDA (cuDNN recomputes them) it stays first-order.
  using AttachFn = void (*)(const std::vector<Tensor>&, const std::string&, const std::vector<Tensor>&, BackwardFn);
  AttachFn attach_fn = idx.defined() ? AttachFn(&autograd::attach_differentiable) : AttachFn(&autograd::attach);
  Shape os = out.shape();
  attach_fn(std::vector<Tensor>{out}, "MaxPool2dBackward", {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = empty(xs, g[0].dtype(), g[0].device());
    backend::call<&backend::PoolKernels::max_pool2d_backward>(dx.device(), dx.dtype(), dx, g[0].detach().contiguous(),
                                                              sx, so, idx, p);
    return std::vector<Tensor>{autograd::linear_in_grad(dx, g[0], "MaxPool2dBackwardBackward", [idx, xs, os](const Tensor& gg) {
      Tensor flat_idx = clamp(idx, 0.0, std::nullopt).reshape({os[0], os[1], os[2] * os[3]});
      Tensor picked = gather(gg.reshape({xs[0], xs[1], xs[2] * xs[3]}), 2, flat_idx).reshape(os);
      return where(ge(idx, 0.0), picked, zeros_like(picked));
    })};
  });
  return out;
}

Tensor avg_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  trace::Range op_range(trace::Layer::op, "avg_pool2d");
  check_input(x, "avg_pool2d");
  if (x.dim() == 3) return avg_pool2d(x.unsqueeze(0), kernel, stride, padding).squeeze(0);
  Pool2dParams p = pool_params(x, kernel, stride, padding, "avg_pool2d");
  if (backend::half_through_f32<&backend::PoolKernels::avg_pool2d_forward>(x.device(), x.dtype()))
    return cast(avg_pool2d(cast(x, DType::f32), kernel, stride, padding), x.dtype());
  Tensor xc = x.detach().contiguous();
  Tensor out = empty(pool_out_shape(xc, p, "avg_pool2d"), xc.dtype(), xc.device());
  backend::call<&backend::PoolKernels::avg_pool2d_forward>(x.device(), xc.dtype(), out, xc, p);
  Tensor so = x.is_cuda() ? out.detach() : Tensor(), sx = x.is_cuda() ? xc : Tensor();
  Shape xs = xc.shape();
  autograd::attach_differentiable(out, "AvgPool2dBackward", {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = empty(xs, g[0].dtype(), g[0].device());
    backend::call<&backend::PoolKernels::avg_pool2d_backward>(dx.device(), dx.dtype(), dx, g[0].detach().contiguous(),
                                                              sx, so, p);
    // Linear in the gradient; its adjoint is the pooling itself.
    return std::vector<Tensor>{autograd::linear_in_grad(dx, g[0], "AvgPool2dBackwardBackward", [=](const Tensor& gg) {
      return avg_pool2d(gg, kernel, stride, padding);
    })};
  });
  return out;
}

// ---- batch norm ---------------------------------------------------------------------------------------------

namespace {
// batch_norm in differentiable ops (its backward under create_graph differentiates this), in the statistics'
// dtype `wdt`: with running statistics (evaluation) they are constants; without, the batch's mean and biased
// variance over every dim but the channels.
Tensor batch_norm_composed(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, DType wdt, double eps) {
  const int64_t C = x.size(1);
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  std::vector<int64_t> rdims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) rdims.push_back(d);
  Tensor xf = x.to(wdt);
  Tensor m = running_mean.defined() ? running_mean.reshape(bshape) : mean(xf, rdims, /*keepdim=*/true);
  Tensor centered = sub(xf, m);
  Tensor v = running_var.defined() ? running_var.reshape(bshape) : mean(square(centered), rdims, /*keepdim=*/true);
  Tensor y = div(centered, sqrt(add(v, eps)));
  if (weight.defined()) y = mul(y, weight.to(wdt).reshape(bshape));
  if (bias.defined()) y = add(y, bias.to(wdt).reshape(bshape));
  return y.to(x.dtype());
}
// The arguments of batch_norm against x: parameters and statistics on x's device, one value per channel, in
// dtype `pdt` (or x's); contiguous statistics that do not require grad; evaluation needs them.
void check_batch_norm_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, DType pdt) {
  const char* op = "batch_norm";
  const int64_t C = x.size(1);
  auto check_param = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    VOLT_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device().str(), " but x is on ",
               x.device().str(), "; expected both on one device");
    VOLT_CHECK(t.dim() == 1 && t.size(0) == C, op, ": ", name, " has shape ", t.shape_str(), " but x has shape ",
               x.shape_str(), "; expected ", shape_to_string({C}), " (one value per channel)");
    VOLT_CHECK(t.dtype() == pdt || t.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()),
               " but x has ", dtype_name(x.dtype()), "; expected ", dtype_name(pdt));
  };
  check_param(weight, "weight");
  check_param(bias, "bias");
  check_param(running_mean, "running_mean");
  check_param(running_var, "running_var");
  for (const Tensor* t : {&running_mean, &running_var})
    VOLT_CHECK(!t->defined() || (t->is_contiguous() && !t->requires_grad()), op,
               ": running statistics must be contiguous buffers that do not require grad");
  VOLT_CHECK(training || (running_mean.defined() && running_var.defined()), op,
             ": evaluation mode needs running_mean and running_var");
  const int64_t per_channel = x.numel() / std::max<int64_t>(C, 1);
  VOLT_CHECK(!training || per_channel > 1, op, ": expected more than 1 value per channel when training, got x of shape ",
             x.shape_str());
}

// What the kernels take: x contiguous, weight and bias in the statistics' dtype `wdt` (ones and zeros when
// absent), the dtypes the parameters' gradients go back in, and which gradients are wanted.
struct BatchNormOperands {
  Tensor xc, w, b;
  DType wdt, weight_dt, bias_dt;
  bool gx, gw, gb;
};

// Training mode: batch statistics (running ones updated by the kernel); the backward is the fused kernel, or the
// composed formula under create_graph.
Tensor batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                        const Tensor& running_var, double momentum, double eps, const BatchNormOperands& ops) {
  const Tensor xc = ops.xc, w = ops.w;
  const DType wdt = ops.wdt, weight_dt = ops.weight_dt, bias_dt = ops.bias_dt;
  const bool gx = ops.gx, gw = ops.gw, gb = ops.gb;
  const int64_t C = x.size(1);
  Tensor out = empty(xc.shape(), xc.dtype(), xc.device());
  Tensor mean = empty({C}, wdt, x.device()), invstd = empty({C}, wdt, x.device());
  backend::call<&backend::BatchNormKernels::batch_norm_forward_train>(x.device(), xc.dtype(), out, mean, invstd, xc,
                                                                      w, ops.b, running_mean, running_var, momentum, eps);
  autograd::attach_differentiable(out, "BatchNormBackward", {x, weight, bias}, [=](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled())
      return autograd::composite_backward({x, weight, bias}, g, [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{batch_norm_composed(in[0], in[1], in[2], Tensor(), Tensor(), wdt, eps)};
      });
    Tensor dx = gx ? empty(xc.shape(), xc.dtype(), xc.device()) : Tensor();
    Tensor dw = gw ? empty({C}, wdt, xc.device()) : Tensor();
    Tensor db = gb ? empty({C}, wdt, xc.device()) : Tensor();
    backend::call<&backend::BatchNormKernels::batch_norm_backward>(xc.device(), xc.dtype(), dx, dw, db,
                                                                   g[0].contiguous(), xc, w, mean, invstd, eps);
    if (dw.defined() && weight_dt != wdt) dw = dw.to(weight_dt);
    if (db.defined() && bias_dt != wdt) db = db.to(bias_dt);
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

// Evaluation mode: the running statistics are constants, so out = x * scale + shift per channel.
Tensor batch_norm_eval(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double eps, const BatchNormOperands& ops) {
  const Tensor xc = ops.xc, w = ops.w;
  const DType wdt = ops.wdt, weight_dt = ops.weight_dt, bias_dt = ops.bias_dt;
  const bool gx = ops.gx, gw = ops.gw, gb = ops.gb;
  const int64_t C = x.size(1);
  Tensor out = empty(xc.shape(), xc.dtype(), xc.device());
  Tensor rm = running_mean.detach(), rv = running_var.detach();
  backend::call<&backend::BatchNormKernels::batch_norm_forward_eval>(x.device(), xc.dtype(), out, xc, w, ops.b, rm, rv,
                                                                     eps);
  autograd::attach_differentiable(out, "BatchNormEvalBackward", {x, weight, bias}, [=](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled())
      return autograd::composite_backward({x, weight, bias}, g, [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{batch_norm_composed(in[0], in[1], in[2], rm, rv, wdt, eps)};
      });
    Shape bshape(static_cast<size_t>(xc.dim()), 1);
    bshape[1] = C;
    std::vector<int64_t> rdims;
    for (int64_t d = 0; d < xc.dim(); ++d)
      if (d != 1) rdims.push_back(d);
    Tensor invstd = rdiv(sqrt(add(rv, eps)), 1.0);
    Tensor gg = g[0];
    Tensor dx, dw, db;
    if (gx) dx = mul(gg, mul(w, invstd).to(xc.dtype()).reshape(bshape));
    if (gw) {
      Tensor xhat = mul(sub(xc, rm.to(xc.dtype()).reshape(bshape)), invstd.to(xc.dtype()).reshape(bshape));
      dw = sum(mul(gg, xhat), rdims).to(weight_dt);
    }
    if (gb) db = sum(gg, rdims).to(bias_dt);
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum, double eps) {
  trace::Range op_range(trace::Layer::op, "batch_norm");
  if (autocast_detail::wants_fp32(x))  // statistics and normalisation in fp32
    return batch_norm(autocast_detail::fp32(x), weight, bias, running_mean, running_var, training, momentum, eps);
  const char* op = "batch_norm";
  check_input(x, op);
  VOLT_CHECK(x.dim() >= 2, "batch_norm: expected x of shape (N, C) or (N, C, H, W) but got ", x.shape_str());
  const int64_t C = x.size(1);
  // Parameters and statistics are in x's dtype, or f32 for half-precision x (cuDNN's rule).
  const DType pdt = (x.dtype() == DType::f16 || x.dtype() == DType::bf16) ? DType::f32 : x.dtype();
  check_batch_norm_args(x, weight, bias, running_mean, running_var, training, pdt);
  if (backend::half_through_f32<&backend::BatchNormKernels::batch_norm_forward_train>(x.device(), x.dtype())) {
    Tensor w32 = weight.defined() ? cast(weight, DType::f32) : Tensor();
    Tensor b32 = bias.defined() ? cast(bias, DType::f32) : Tensor();
    return cast(batch_norm(cast(x, DType::f32), w32, b32, running_mean, running_var, training, momentum, eps),
                x.dtype());
  }
  // weight / bias may be in x's dtype (half x on the GPU): they are converted to the statistics' dtype here and
  // their gradients converted back, as on the CPU.
  const DType wdt = running_mean.defined() ? running_mean.dtype() : pdt;
  VOLT_CHECK(wdt == pdt, op, ": running statistics / parameters have dtype ", dtype_name(wdt), " but x has ",
             dtype_name(x.dtype()), "; expected ", dtype_name(pdt));
  // Both statistics are read and written as wdt (cuDNN's batch-norm descriptor has a single type).
  for (auto [t, name] : {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"}})
    VOLT_CHECK(!t->defined() || t->dtype() == wdt, op, ": ", name, " has dtype ", dtype_name(t->dtype()),
               " but the other statistics are ", dtype_name(wdt), "; expected both in ", dtype_name(pdt));
  BatchNormOperands in;
  in.wdt = wdt;
  in.weight_dt = weight.defined() ? weight.dtype() : wdt;
  in.bias_dt = bias.defined() ? bias.dtype() : wdt;
  in.xc = x.detach().contiguous();
  in.w = weight.defined() ? weight.detach().to(wdt).contiguous() : full({C}, 1.0, wdt, x.device());
  in.b = bias.defined() ? bias.detach().to(wdt).contiguous() : zeros({C}, wdt, x.device());
  in.gw = weight.defined() && weight.requires_grad();
  in.gb = bias.defined() && bias.requires_grad();
  in.gx = x.requires_grad();
  return training ? batch_norm_train(x, weight, bias, running_mean, running_var, momentum, eps, in)
                  : batch_norm_eval(x, weight, bias, running_mean, running_var, eps, in);
}

}  // namespace volt
