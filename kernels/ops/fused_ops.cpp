// The fused ops of kernels/ops.h's "fused ops" section: argument checks, chunking and autograd formulas around the
// kernels of kernels/backend/norm.h (residual_norm_*) and kernels/backend/loss.h (classifier_fwd), and with the
// GEMM (kernels/ops/gemm_util.h) linear_cross_entropy's chunked head.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/gemm_util.h>
#include <volt/kernels/ops/norm_out_op.h>

namespace volt {

namespace {

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

void check_same(const Tensor& a, const Tensor& b, const char* op, const char* na, const char* nb,
                bool same_dtype = true) {
  VOLT_CHECK(a.device() == b.device(), op, ": ", nb, " is on ", b.device().str(), " but ", na, " is on ",
             a.device().str(), "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(a.shape() == b.shape(), op, ": ", nb, " has shape ", b.shape_str(), " but ", na, " has shape ",
             a.shape_str(), "; expected the same shape");
  VOLT_CHECK(!same_dtype || a.dtype() == b.dtype(), op, ": ", nb, " has dtype ", dtype_name(b.dtype()), " but ", na,
             " has ", dtype_name(a.dtype()), "; expected one dtype (cast one, or run under autocast, which adds in f32)");
}

void check_norm_param(const Tensor& t, const Tensor& x, const char* op, const char* name) {
  if (!t.defined()) return;
  const int64_t c = x.size(x.dim() - 1);
  VOLT_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device().str(), " but x is on ", x.device().str(),
             "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(t.shape() == Shape{c}, op, ": ", name, " has shape ", t.shape_str(), " but x of shape ", x.shape_str(),
             " needs ", shape_to_string(Shape{c}), " (one value per channel of the last dim)");
  const DType pdt = acc_dtype(x.dtype());
  VOLT_CHECK(t.dtype() == x.dtype() || t.dtype() == pdt, op, ": ", name, " has dtype ", dtype_name(t.dtype()),
             " but x has ", dtype_name(x.dtype()), "; expected ", dtype_name(x.dtype()),
             pdt != x.dtype() ? " or " + std::string(dtype_name(pdt)) : std::string());
}

Tensor param_as(const Tensor& t, DType pdt) { return t.defined() ? t.detach().to(pdt).contiguous() : Tensor(); }

void check_residual_inputs(const Tensor& x, const Tensor& residual, const char* op) {
  VOLT_CHECK(x.defined() && residual.defined(), op, ": x and residual must both be defined");
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
  VOLT_CHECK(is_floating(residual.dtype()), op, ": expected a floating-point residual but got ",
             dtype_name(residual.dtype()));
}

// The dtype an autocast matmul casts an f32 input to (f16 or bf16), or nullopt outside autocast.
std::optional<DType> matmul_input_dtype() {
  const AutocastState st = autocast_state();
  if (st.enabled && (st.dtype == DType::f16 || st.dtype == DType::bf16)) return st.dtype;
  return std::nullopt;
}

// residual_layer_norm on inputs autocast has already settled, with y (and the gradient it takes) in y_dt: x's
// dtype, or f16/bf16 for f32 x. The residual is in x's dtype or, where y_dt is a half type for f32 x, in y_dt: a
// half sublayer output read as it is (the kernels widen it as a cast would) and given its gradient in its own
// dtype, written by the backward kernel beside s's (no cast either way).
std::pair<Tensor, Tensor> residual_layer_norm_to(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                                 const Tensor& bias, double eps, DType y_dt) {
  const char* op = "residual_layer_norm";
  const bool half_residual = x.dtype() == DType::f32 && y_dt != DType::f32 && residual.dtype() == y_dt;
  check_same(x, residual, op, "x", "residual", /*same_dtype=*/!half_residual);
  VOLT_CHECK(x.dim() >= 1, op, ": x is a scalar; expected (..., C), normalised over the last dim");
  VOLT_CHECK(eps >= 0.0, op, ": eps must be non-negative, got ", eps);
  check_norm_param(weight, x, op, "weight");
  check_norm_param(bias, x, op, "bias");

  const DType pdt = acc_dtype(x.dtype());
  const Device dev = x.device();
  NormGeom g;
  g.row_size = x.size(x.dim() - 1);
  g.rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor xc = x.detach().contiguous(), rc = residual.detach().contiguous();
  Tensor w = param_as(weight, pdt), b = param_as(bias, pdt);
  Tensor s = empty(xc.shape(), xc.dtype(), dev), y = empty(xc.shape(), y_dt, dev);
  Tensor mean = empty({g.rows}, pdt, dev), rstd = empty({g.rows}, pdt, dev);
  const bool any = xc.numel() > 0;
  if (any)
    backend::call<&backend::NormKernels::residual_norm_fwd>(dev, xc.dtype(), s, y, mean, rstd, xc, rc, w, b, g, eps);
  const bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  const DType weight_dt = weight.defined() ? weight.dtype() : pdt, bias_dt = bias.defined() ? bias.dtype() : pdt;
  Tensor s_saved = s.detach();
  const DType r_dt = residual.dtype();
  autograd::attach_differentiable(std::vector<Tensor>{s, y}, "ResidualLayerNormBackward", {x, residual, weight, bias},
                   [=](const std::vector<Tensor>& grads) {
    if (autograd::create_graph_enabled()) {
      // Layer norm's backward written out in recorded ops of s itself: s is this node's output 0 (saved_output
      // ties it to the node, so a higher-order gradient reaching s comes back here and on to x and r), and x and r
      // both get s's total gradient. The closure keeps s, never x and r: under autocast r is an f32 copy of a half
      // sublayer output that nothing else keeps (a block's worth of activations per layer).
      const Tensor s_rec = autograd::saved_output(s_saved, 0);
      Tensor ds = grads[0], dw, db;
      if (grads[1].defined()) {
        const Tensor s2 = s_rec.to(pdt).reshape({g.rows, g.row_size});
        const Tensor gy = grads[1].to(pdt).reshape({g.rows, g.row_size});
        const Tensor centered = sub(s2, volt::mean(s2, {1}, /*keepdim=*/true));
        const Tensor var = volt::mean(square(centered), {1}, /*keepdim=*/true);
        const Tensor rstd = div(ones({}, pdt, dev), sqrt(add(var, eps)));
        const Tensor xhat = mul(centered, rstd);
        const Tensor gyw = weight.defined() ? mul(gy, weight.to(pdt)) : gy;
        // dx = rstd * (gyw - mean(gyw) - xhat * mean(gyw * xhat)), normmath::norm_backward_dx's formula
        const Tensor dx =
            mul(rstd, sub(sub(gyw, volt::mean(gyw, {1}, true)), mul(xhat, volt::mean(mul(gyw, xhat), {1}, true))));
        const Tensor from_y = dx.reshape(s_saved.shape()).to(xc.dtype());
        ds = ds.defined() ? add(ds, from_y) : from_y;
        if (gw) dw = sum(mul(gy, xhat), {0}).to(weight_dt);
        if (gb) db = sum(gy, {0}).to(bias_dt);
      }
      return std::vector<Tensor>{ds, half_residual && ds.defined() ? ds.to(r_dt) : ds, dw, db};
    }
    auto as = [](const Tensor& t, DType dt) { return (t.dtype() == dt ? t : t.to(dt)).contiguous(); };
    Tensor ds_other = as(grads[0], xc.dtype()), dy = as(grads[1], y_dt);
    Tensor ds = empty(xc.shape(), xc.dtype(), dev);
    Tensor dr = half_residual ? empty(xc.shape(), r_dt, dev) : Tensor();
    Tensor dw = gw ? empty({g.row_size}, pdt, dev) : Tensor();
    Tensor db = gb ? empty({g.row_size}, pdt, dev) : Tensor();
    if (any) {
      backend::call<&backend::NormKernels::residual_norm_bwd>(dev, xc.dtype(), ds, dr, dy, ds_other, s_saved,
                                                               mean, rstd, w, g);
      if (gw || gb)
        backend::call<&backend::NormKernels::norm_bwd>(dev, xc.dtype(), Tensor(), dw, db, dy, s_saved, mean, rstd, w,
                                                       g);
    } else {
      for (Tensor* t : {&ds, &dr, &dw, &db})
        if (t->defined()) t->zero_();
    }
    if (dw.defined()) dw = dw.to(weight_dt);
    if (db.defined()) db = db.to(bias_dt);
    return std::vector<Tensor>{ds, half_residual ? dr : ds, dw, db};  // d(x + r)/dx = d(x + r)/dr = 1
  });
  return {s, y};
}

// fused_cross_entropy's class-index targets (contiguous i64) against v classes, for CPU tensors checked on the host
// before the first chunk runs: the kernel checks each chunk's too, but a bad target in a later chunk would come
// after the earlier chunks had written their gradients over the logits (grad_in_logits). linear_cross_entropy needs
// no such pass (its chunks write only its own buffers). On CUDA the kernel checks them (a bad target gives NaN and
// is reported at the device's next synchronisation, runtime/index_check.h).
void check_targets(const Tensor& tc, int64_t v, int64_t ignore_index, IndexCheck check) {
  if (tc.is_cuda()) return;
  const int64_t* tp = static_cast<const int64_t*>(tc.data_ptr());
  for (int64_t i = 0; i < tc.numel(); ++i)
    if (tp[i] != ignore_index && (tp[i] < 0 || tp[i] >= v)) VOLT_FAIL(detail::index_check_message(check, i, tp[i], v));
}

// The number of rows whose target is not ignore_index: a 0-d tensor of dtype `acc` on the targets' device, counted
// there (no host sync).
Tensor counted_rows(const Tensor& tc, int64_t ignore_index, DType acc) {
  return cast(sum(ne(tc, static_cast<double>(ignore_index))), acc);
}

// 1 / (the number of counted rows) for a mean, 1 for a sum, as counted_rows.
Tensor loss_scale(const Tensor& tc, Reduction reduction, int64_t ignore_index, DType acc) {
  if (reduction != Reduction::Mean) return ones({}, acc, tc.device());
  return div(ones({}, acc, tc.device()), counted_rows(tc, ignore_index, acc));
}

// The classifiers' loss dtype for a compute dtype t: f32 for f16/bf16 under autocast or with f32_loss, else t.
DType loss_dtype(DType t, bool f32_loss) {
  return (autocast_enabled() || f32_loss) && acc_dtype(t) != t ? acc_dtype(t) : t;
}

}  // namespace

std::pair<Tensor, Tensor> residual_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                              const Tensor& bias, double eps) {
  trace::Range op_range(trace::Layer::op, "residual_layer_norm");
  check_residual_inputs(x, residual, "residual_layer_norm");
  using autocast_detail::fp32;
  if (autocast_detail::wants_fp32(x) || autocast_detail::wants_fp32(residual))  // the residual stream in fp32
    return residual_layer_norm_to(fp32(x), fp32(residual), fp32(weight), fp32(bias), eps, DType::f32);
  return residual_layer_norm_to(x, residual, weight, bias, eps, x.dtype());
}

std::pair<Tensor, Tensor> residual_layer_norm_for_matmul(const Tensor& x, const Tensor& residual,
                                                         const Tensor& weight, const Tensor& bias, double eps) {
  const std::optional<DType> md = matmul_input_dtype();
  if (!md) return residual_layer_norm(x, residual, weight, bias, eps);
  trace::Range op_range(trace::Layer::op, "residual_layer_norm");
  check_residual_inputs(x, residual, "residual_layer_norm");
  using autocast_detail::fp32;
  const Tensor xf = fp32(x);
  // A residual already in the matmul dtype (a sublayer's output under this autocast) is added without a cast.
  const bool half_residual = xf.dtype() == DType::f32 && residual.dtype() == *md &&
                             !kernel_paths::disabled(kernel_paths::kHalfResidual);
  const Tensor rf = half_residual ? residual : fp32(residual);
  const DType y_dt = xf.dtype() == DType::f32 && (rf.dtype() == DType::f32 || half_residual) ? *md : xf.dtype();
  return residual_layer_norm_to(xf, rf, fp32(weight), fp32(bias), eps, y_dt);
}

Tensor layer_norm_for_matmul(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                             double eps) {
  const std::optional<DType> md = matmul_input_dtype();
  if (!md || !x.defined() || !is_floating(x.dtype()) || x.dtype() == DType::f64)
    return layer_norm(x, normalized_shape, weight, bias, eps);
  trace::Range op_range(trace::Layer::op, "layer_norm");
  using autocast_detail::fp32;
  return norm_detail::layer_norm_to(fp32(x), normalized_shape, fp32(weight), fp32(bias), eps, *md);
}

Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, const FusedCrossEntropyOptions& opt) {
  trace::Range op_range(trace::Layer::op, "fused_cross_entropy");
  const char* op = "fused_cross_entropy";
  VOLT_CHECK(logits.defined() && target.defined(), op, ": logits and target must both be defined");
  VOLT_CHECK(is_floating(logits.dtype()), op, ": logits must be floating point, got ", dtype_name(logits.dtype()));
  VOLT_CHECK(target.dtype() == DType::i64, op, ": target must hold class indices of dtype int64, got ",
             dtype_name(target.dtype()));
  VOLT_CHECK(logits.device() == target.device(), op, ": target is on ", target.device().str(), " but logits are on ",
             logits.device().str(), "; expected both on one device");
  VOLT_CHECK(logits.dim() == 2, op, ": logits must be (N, V), got shape ", logits.shape_str(),
             " (flatten the leading dims first)");
  const int64_t n = logits.size(0), v = logits.size(1);
  VOLT_CHECK(target.shape() == Shape{n}, op, ": target has shape ", target.shape_str(), " but logits of shape ",
             logits.shape_str(), " need ", shape_to_string(Shape{n}));
  VOLT_CHECK(v > 0, op, ": logits have no classes (shape ", logits.shape_str(), ")");
  VOLT_CHECK(opt.reduction != Reduction::None, op, ": reduction None is not fused (the gradient is written in the "
             "forward pass for one scalar loss); use cross_entropy for per-row losses");
  VOLT_CHECK(opt.chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: one chunk), got ", opt.chunk_rows);
  Tensor tc = target.contiguous();
  constexpr IndexCheck kCheck{IndexCheckSite::fused_cross_entropy};
  check_targets(tc, v, opt.ignore_index, kCheck);

  const Device dev = logits.device();
  const DType T = logits.dtype(), A = acc_dtype(T);
  // Under autocast (or with f32_loss) a half loss is returned in f32 (the losses' autocast rule); the kernel reads
  // half logits in their dtype and computes in f32 either way, so the logits are not cast (the intended exception
  // to cross_entropy's fp32 autocast rule: no f32 copy of a large logits tensor) and the gradient keeps their dtype.
  const DType out_dt = loss_dtype(T, opt.f32_loss);
  const bool need_grad = autograd::grad_enabled() && logits.requires_grad();
  Tensor lc = logits.detach().contiguous();
  const bool in_place = need_grad && opt.grad_in_logits && lc.data_ptr() == logits.data_ptr();
  Tensor grad = need_grad ? (in_place ? lc : empty({n, v}, T, dev)) : Tensor();
  const Tensor scale = loss_scale(tc, opt.reduction, opt.ignore_index, A);
  const int64_t all = std::max<int64_t>(n, 1), chunk = opt.chunk_rows > 0 ? std::min(opt.chunk_rows, all) : all;
  Tensor total = zeros({}, A, dev), loss_rows = empty({chunk}, A, dev);
  for (int64_t row0 = 0; row0 < n; row0 += chunk) {
    const int64_t rows = std::min(chunk, n - row0);
    Tensor part = rows == chunk ? loss_rows : loss_rows.narrow(0, 0, rows);
    backend::call<&backend::LossKernels::classifier_fwd>(dev, T, part, grad, lc, tc, scale, row0, rows, v,
                                                          opt.ignore_index, kCheck);
    total = add(total, sum(part));
  }
  Tensor loss = cast(mul(total, scale), out_dt);
  if (need_grad) {
    auto used = std::make_shared<bool>(false);
    // With the gradient written over the logits (grad_in_logits) the logits are gone, so a second derivative
    // cannot be formed: that node stays first-order (differentiating through it again names the op).
    using AttachFn = void (*)(const std::vector<Tensor>&, const std::string&, const std::vector<Tensor>&, BackwardFn);
    AttachFn attach_fn = in_place ? AttachFn(&autograd::attach) : AttachFn(&autograd::attach_differentiable);
    FusedCrossEntropyOptions o = opt;
    attach_fn(std::vector<Tensor>{loss}, "FusedCrossEntropyBackward", {logits}, [=](const std::vector<Tensor>& grads) {
      if (!in_place && autograd::create_graph_enabled())
        return autograd::composite_backward({logits}, grads, [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{cast(cross_entropy(in[0], target, o.reduction, o.ignore_index), out_dt)};
        });
      if (!in_place) return std::vector<Tensor>{mul(grad, cast(cast(grads[0], DType::f64).reshape({}), T))};
      VOLT_CHECK(!*used, "fused_cross_entropy: a second backward through a loss whose gradient was written in place "
                 "of the logits (grad_in_logits); backpropagate it once, or turn grad_in_logits off");
      *used = true;
      // The upstream gradient in the accumulation dtype, used as it is (f32 for f16/bf16: not rounded to the half
      // dtype first); exactly 1 (a loss backpropagated as it is) writes nothing.
      Tensor coef = cast(grads[0], A).reshape({}).contiguous();
      backend::call<&backend::OptimKernels::scale_by>(dev, T, std::vector<Tensor>{grad}, coef);
      return std::vector<Tensor>{grad};
    });
  }
  return loss;
}

namespace {

void check_linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                                const LinearCrossEntropyOptions& opt) {
  const char* op = "linear_cross_entropy";
  VOLT_CHECK(x.defined() && weight.defined() && target.defined(), op, ": x, weight and target must all be defined");
  VOLT_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()), op, ": x and weight must be floating point, got ",
             dtype_name(x.dtype()), " and ", dtype_name(weight.dtype()));
  VOLT_CHECK(target.dtype() == DType::i64, op, ": target must hold class indices of dtype int64, got ",
             dtype_name(target.dtype()));
  for (const Tensor* t : {&weight, &target})
    VOLT_CHECK(t->device() == x.device(), op, ": ", t == &weight ? "weight" : "target", " is on ",
               t->device().str(), " but x is on ", x.device().str(), "; expected one device");
  VOLT_CHECK(x.dim() == 2 && weight.dim() == 2, op, ": x must be (N, C) and weight (V, C), got ", x.shape_str(),
             " and ", weight.shape_str(), " (flatten x's leading dims first)");
  VOLT_CHECK(weight.size(1) == x.size(1), op, ": x has ", x.size(1), " features but weight ", weight.shape_str(),
             " expects ", weight.size(1), " (weight is (V, C), as a linear layer's)");
  VOLT_CHECK(weight.size(0) > 0, op, ": weight has no classes (shape ", weight.shape_str(), ")");
  VOLT_CHECK(target.shape() == Shape{x.size(0)}, op, ": target has shape ", target.shape_str(), " but x of shape ",
             x.shape_str(), " needs ", shape_to_string(Shape{x.size(0)}));
  VOLT_CHECK(opt.reduction != Reduction::None, op, ": reduction None is not fused (the gradient is written in the "
             "forward pass for one scalar loss); use linear and cross_entropy for per-row losses");
  VOLT_CHECK(opt.chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: chunks of at most ",
             kLinearCrossEntropyChunkBytes, " bytes of logits), got ", opt.chunk_rows);
}

// Rows per chunk: the option, or the fewest equal chunks within the byte budget, rounded up to a multiple of 64
// rows where the budget holds 64 rows or more (the budget's row count is rounded down to 64 first, so the
// rounding up never leaves it).
int64_t chunk_rows_for(int64_t n, int64_t v, DType t, int64_t option) {
  const int64_t all = std::max<int64_t>(n, 1);
  if (option > 0) return std::min(option, all);
  const int64_t cap = std::max<int64_t>(1, kLinearCrossEntropyChunkBytes / (v * static_cast<int64_t>(itemsize(t))));
  const int64_t cap64 = cap >= 64 ? cap / 64 * 64 : cap;
  const int64_t chunks = (all + cap64 - 1) / cap64, rows = (all + chunks - 1) / chunks;
  return std::min(all, cap >= 64 ? (rows + 63) / 64 * 64 : rows);
}

// What linear_cross_entropy's forward leaves for its backward: the loss's row sum and the unscaled gradients.
struct HeadPass {
  Tensor total, dx, dw;
};

// The chunk loop: for rows [row0, row0 + r) the logits (r, V) = x rows @ w^T into one reused buffer, the classifier
// over them (gradient written in place, unscaled), then dx rows = dlogits @ w and dw (+)= dlogits^T @ x rows.
HeadPass head_pass(const Tensor& xc, const Tensor& w, const Tensor& tc, int64_t ignore_index, int64_t rows,
                   bool gx, bool gw) {
  using linalg_detail::gemm_into;
  const int64_t n = xc.size(0), c = xc.size(1), v = w.size(0);
  const Device dev = xc.device();
  const DType T = xc.dtype(), A = acc_dtype(T);
  HeadPass p;
  p.total = zeros({}, A, dev);
  if (gx) p.dx = empty({n, c}, T, dev);
  if (gw) p.dw = n == 0 ? zeros({v, c}, A, dev) : empty({v, c}, A, dev);
  const Tensor buf = empty({rows, v}, T, dev), loss_rows = empty({rows}, A, dev), unit = ones({}, A, dev);
  for (int64_t row0 = 0; row0 < n; row0 += rows) {
    const int64_t r = std::min(rows, n - row0);
    const Tensor lg = r == rows ? buf : buf.narrow(0, 0, r), part = r == rows ? loss_rows : loss_rows.narrow(0, 0, r);
    const Tensor xr = xc.narrow(0, row0, r);
    gemm_into(lg, xr, w, false, false, true);  // (r, C) @ (V, C)^T
    const IndexCheck check{IndexCheckSite::linear_cross_entropy, -1, row0};  // the chunk's targets start at row0
    backend::call<&backend::LossKernels::classifier_fwd>(dev, T, part, gx || gw ? lg : Tensor(), lg,
                                                          tc.narrow(0, row0, r), unit, 0, r, v, ignore_index, check);
    p.total = add(p.total, sum(part));
    if (gx) gemm_into(p.dx.narrow(0, row0, r), lg, w, false);  // (r, V) @ (V, C)
    if (gw) gemm_into(p.dw, lg, xr, row0 > 0, true, false);     // (r, V)^T @ (r, C), accumulated in A
  }
  return p;
}

// The composition linear_cross_entropy replaces (VOLT_DISABLE_KERNELS=chunked_head): the whole logits, then the
// classifier over them with the gradient in their storage; f16 logits in f32 (their gradient would underflow).
Tensor linear_then_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                                 const LinearCrossEntropyOptions& opt) {
  Tensor logits = linear(x, weight);
  if (logits.dtype() == DType::f16) logits = logits.to(DType::f32);
  FusedCrossEntropyOptions o;
  o.reduction = opt.reduction;
  o.ignore_index = opt.ignore_index;
  o.grad_in_logits = true;
  o.f32_loss = opt.f32_loss;
  return fused_cross_entropy(logits, target, o);
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& opt) {
  trace::Range op_range(trace::Layer::op, "linear_cross_entropy");
  check_linear_cross_entropy(x, weight, target, opt);
  if (kernel_paths::disabled(kernel_paths::kChunkedHead)) return linear_then_cross_entropy(x, weight, target, opt);
  // The product's dtype: autocast's for f32/f16/bf16 inputs (as linear), else the inputs' own, which must agree.
  const Tensor xl = autocast_detail::lower(x);
  const DType T = xl.dtype(), A = acc_dtype(T), wdt = weight.dtype();
  const DType wt = autocast_detail::wants_lower(weight) ? autocast_state().dtype : wdt;
  VOLT_CHECK(wt == T, "linear_cross_entropy: weight has dtype ", dtype_name(wdt), " but x has ",
             dtype_name(x.dtype()), "; expected one floating dtype (cast one, or run under autocast)");
  const Tensor tc = target.contiguous();
  const Device dev = x.device();
  const bool grad = autograd::grad_enabled(), gx = grad && xl.requires_grad(), gw = grad && weight.requires_grad();
  const Tensor w = (wdt == T ? weight.detach() : weight.detach().to(T)).contiguous();
  const int64_t rows = chunk_rows_for(x.size(0), weight.size(0), T, opt.chunk_rows);
  HeadPass p = head_pass(xl.detach().contiguous(), w, tc, opt.ignore_index, rows, gx, gw);
  // The mean's 1 / count for the loss; for the gradients 1 / max(count, 1): with no counted row the loss is 0 / 0
  // (NaN) and every gradient 0, which the unscaled ones already are.
  const Tensor one = ones({}, A, dev), count = counted_rows(tc, opt.ignore_index, A);
  const bool mean = opt.reduction == Reduction::Mean;
  Tensor loss = cast(mean ? div(p.total, count) : p.total, loss_dtype(T, opt.f32_loss));
  if (!gx && !gw) return loss;
  const Tensor grad_scale = mean ? div(one, maximum(count, one)) : one;
  auto used = std::make_shared<bool>(false);
  // First-order only: the logits the gradient came from are gone (a second derivative through it names the op).
  autograd::attach(std::vector<Tensor>{loss}, "LinearCrossEntropyBackward", {xl, weight},
                   [=, dx = p.dx, dw = p.dw](const std::vector<Tensor>& grads) {
    VOLT_CHECK(!*used, "linear_cross_entropy: a second backward through a loss whose gradients were formed in the "
               "forward; backpropagate it once");
    *used = true;
    // The upstream gradient times the mean's 1 / count (the chunks' gradients were written unscaled), in A.
    const Tensor coef = mul(cast(grads[0], A).reshape({}), grad_scale).contiguous();
    if (dx.defined()) backend::call<&backend::OptimKernels::scale_by>(dev, T, std::vector<Tensor>{dx}, coef);
    if (dw.defined()) backend::call<&backend::OptimKernels::scale_by>(dev, A, std::vector<Tensor>{dw}, coef);
    return std::vector<Tensor>{dx, dw.defined() && dw.dtype() != wdt ? dw.to(wdt) : dw};
  });
  return loss;
}

}  // namespace volt
