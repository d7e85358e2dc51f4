// softmax / log_softmax, the fused class-index losses (cross_entropy, nll_loss), mse_loss and dropout.
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/philox_draw.h>
#include <volt/kernels/ops/reduce_util.h>

namespace volt {

namespace {

DType acc_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

Tensor softmax_impl(const Tensor& a, int64_t dim, bool log, const char* op) {
  trace::Range op_range(trace::Layer::op, op);
  VOLT_CHECK(a.defined(), op, ": the input is undefined");
  if (autocast_detail::wants_fp32(a)) return softmax_impl(autocast_detail::fp32(a), dim, log, op);
  if (a.dim() == 0) {  // a scalar is a one-element distribution
    wrap_dim(dim, 1, op);
    return softmax_impl(a.reshape({1}), 0, log, op).reshape({});
  }
  DimLayout L = dim_layout(a, dim, /*keepdim=*/true, op);
  Tensor in = a.detach();
  if (!is_floating(in.dtype())) in = in.to(DType::f32);
  in = in.contiguous();
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  if (out.numel() > 0)
    backend::call<&backend::SoftmaxKernels::softmax_fwd>(in.device(), in.dtype(), out, in, L.outer, L.r, L.inner, log);
  Tensor so = out.detach();
  const int64_t d = L.dim;
  // Backward in terms of the saved output (composed of differentiable ops, so double backward works):
  //   softmax:     dx = y * (g - sum(g * y))
  //   log_softmax: dx = g - exp(y) * sum(g)
  autograd::attach_differentiable(out, log ? "LogSoftmaxBackward" : "SoftmaxBackward", {a},
                                  [so, d, log](const std::vector<Tensor>& g) {
    Tensor y = autograd::saved_output(so);  // under create_graph: the output, tied to this node
    if (log) return std::vector<Tensor>{sub(g[0], mul(exp(y), sum(g[0], {d}, true)))};
    return std::vector<Tensor>{mul(y, sub(g[0], sum(mul(g[0], y), {d}, true)))};
  });
  return out;
}

struct ClassGeom {
  int64_t n = 1, c = 1, inner = 1;
};

// Checks (input, target) of a class-index loss and returns the (n, c, inner) layout.
ClassGeom check_class_loss(const Tensor& input, const Tensor& target, const char* op,
                           const char* input_name) {
  VOLT_CHECK(input.defined(), op, ": ", input_name, " is undefined");
  VOLT_CHECK(target.defined(), op, ": target is undefined");
  VOLT_CHECK(input.device() == target.device(), op, ": ", input_name, " is on ", input.device().str(),
             " but target is on ", target.device().str(), "; move one with .to(device)");
  VOLT_CHECK(is_floating(input.dtype()), op, ": ", input_name, " must be floating point, got ",
             dtype_name(input.dtype()));
  VOLT_CHECK(target.dtype() == DType::i64, op, ": target must hold class indices of dtype int64, got ",
             dtype_name(target.dtype()), "; convert with target.to(DType::i64)");
  VOLT_CHECK(input.dim() >= 1, op, ": ", input_name, " must be (C), (N, C) or (N, C, d...), got a scalar");
  ClassGeom geom;
  Shape expected;
  if (input.dim() == 1) {
    geom.c = input.size(0);
  } else {
    geom.n = input.size(0);
    geom.c = input.size(1);
    expected.push_back(geom.n);
    for (int64_t i = 2; i < input.dim(); ++i) {
      geom.inner *= input.size(i);
      expected.push_back(input.size(i));
    }
  }
  VOLT_CHECK(target.shape() == expected, op, ": target has shape ", target.shape_str(), " but ", input_name,
             " of shape ", input.shape_str(), " needs a target of shape ", shape_to_string(expected));
  VOLT_CHECK(geom.c > 0, op, ": ", input_name, " has no classes (shape ", input.shape_str(), ")");
  // The class indices are the kernels' to check (runtime/index_check.h): the CPU's throw before writing anything; on
  // CUDA a host check would wait for the device every step, so a bad target gives its row a NaN loss and is reported
  // at the device's next synchronisation.
  return geom;
}

LossReduction to_loss_reduction(Reduction r) {
  switch (r) {
    case Reduction::Mean: return LossReduction::Mean;
    case Reduction::Sum: return LossReduction::Sum;
    case Reduction::None: return LossReduction::None;
  }
  return LossReduction::Mean;
}

// The class loss in differentiable ops (the backward under create_graph differentiates this):
//   per position: -((1 - eps) * logp[target] + eps / C * sum_c logp[c]), zero where target == ignore_index,
// with logp = log_softmax(input) (cross_entropy) or the input itself (nll_loss, eps = 0); mean divides by the
// number of positions not ignored.
Tensor class_loss_composed(const Tensor& input, const Tensor& target, const CeParams& p) {
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const double c = static_cast<double>(input.size(cdim));
  Tensor logp = p.nll ? input : log_softmax(input, cdim);
  Tensor valid = ne(target, static_cast<double>(p.ignore_index));
  Tensor safe = where(valid, target, zeros_like(target));
  Tensor picked = gather(logp, cdim, safe.unsqueeze(cdim)).squeeze(cdim);
  Tensor per = neg(mul(picked, 1.0 - p.label_smoothing));
  if (p.label_smoothing > 0) per = sub(per, mul(sum(logp, {cdim}), p.label_smoothing / c));
  per = where(valid, per, zeros_like(per));
  if (p.reduction == LossReduction::None) return per;
  Tensor total = sum(per);
  if (p.reduction == LossReduction::Sum) return total;
  return div(total, sum(valid.to(total.dtype())));
}

Tensor class_loss(const Tensor& input, const Tensor& target, Reduction reduction, int64_t ignore_index,
                  double label_smoothing, bool nll, const char* op, const char* input_name) {
  if (autocast_detail::wants_fp32(input))
    return class_loss(autocast_detail::fp32(input), target, reduction, ignore_index, label_smoothing, nll, op,
                      input_name);
  VOLT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             label_smoothing);
  ClassGeom geom = check_class_loss(input, target, op, input_name);
  CeParams p;
  p.ignore_index = ignore_index;
  p.label_smoothing = label_smoothing;
  p.reduction = to_loss_reduction(reduction);
  p.nll = nll;
  p.check.site = nll ? IndexCheckSite::nll_loss : IndexCheckSite::cross_entropy;
  Tensor x = input.detach().contiguous();
  Tensor t = target.detach().contiguous();
  const Device dev = x.device();
  Tensor out = empty(reduction == Reduction::None ? target.shape() : Shape{}, x.dtype(), dev);
  Tensor lse = nll ? Tensor() : empty({geom.n * geom.inner}, acc_dtype(x.dtype()), dev);  // (N * d...)
  Tensor count = empty({}, acc_dtype(x.dtype()), dev);  // non-ignored targets, the mean's divisor
  backend::call<&backend::LossKernels::class_loss_fwd>(dev, x.dtype(), out, lse, count, x, t, geom.n, geom.c,
                                                       geom.inner, p);
  autograd::attach_differentiable(out, nll ? "NllLossBackward" : "CrossEntropyBackward", {input},
                   [x, t, lse, count, geom, p, input, target](const std::vector<Tensor>& g) {
                     if (autograd::create_graph_enabled())
                       return autograd::composite_backward({input}, g, [&](const std::vector<Tensor>& in) {
                         return std::vector<Tensor>{class_loss_composed(in[0], target, p)};
                       });
                     // Fused: grad = g_row * (softmax - (1 - eps) * onehot - eps / C), zero on ignored rows.
                     Tensor go = g[0].dtype() == x.dtype() ? g[0].contiguous() : g[0].to(x.dtype()).contiguous();
                     Tensor gi = empty(x.shape(), x.dtype(), x.device());
                     backend::call<&backend::LossKernels::class_loss_bwd>(x.device(), x.dtype(), gi, go, x, t, lse,
                                                                          count, geom.n, geom.c, geom.inner, p);
                     return std::vector<Tensor>{gi};
                   });
  return out;
}

// dropout's backward: the gradient times the kept mask and the scale. Linear in the gradient and its own adjoint,
// so under create_graph it differentiates to itself.
Tensor dropout_grad(const Tensor& g, const Tensor& mask, double scale) {
  Tensor go = g.detach().contiguous();
  Tensor gi = empty(go.shape(), go.dtype(), go.device());
  if (gi.numel() > 0)
    backend::call<&backend::DropoutKernels::dropout_bwd>(go.device(), go.dtype(), gi, go, mask, scale);
  return autograd::linear_in_grad(gi, g, "DropoutBackwardBackward",
                                  [mask, scale](const Tensor& gg) { return dropout_grad(gg, mask, scale); });
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_impl(a, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_impl(a, dim, true, "log_softmax"); }

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  trace::Range op_range(trace::Layer::op, "cross_entropy");
  return class_loss(logits, target, reduction, ignore_index, label_smoothing, false, "cross_entropy", "logits");
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  trace::Range op_range(trace::Layer::op, "nll_loss");
  return class_loss(log_probs, target, reduction, ignore_index, 0.0, true, "nll_loss", "log_probs");
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  trace::Range op_range(trace::Layer::op, "mse_loss");
  VOLT_CHECK(input.defined() && target.defined(), "mse_loss: input and target must be defined");
  if (autocast_detail::wants_fp32(input) || autocast_detail::wants_fp32(target))
    return mse_loss(autocast_detail::fp32(input), autocast_detail::fp32(target), reduction);
  // PyTorch broadcasts here with a warning; a silent (N, 1) vs (N) broadcast is almost always a bug, so refuse.
  VOLT_CHECK(input.shape() == target.shape(), "mse_loss: input has shape ", input.shape_str(), " but target has ",
             target.shape_str(), "; expected equal shapes");
  VOLT_CHECK(is_floating(input.dtype()), "mse_loss: input must be floating point, got ", dtype_name(input.dtype()));
  Tensor sq = square(sub(input, target));
  switch (reduction) {
    case Reduction::Mean: return mean(sq);
    case Reduction::Sum: return sum(sq);
    case Reduction::None: return sq;
  }
  return sq;
}

Tensor dropout(const Tensor& a, double p, bool training, Generator* gen) {
  trace::Range op_range(trace::Layer::op, "dropout");
  VOLT_CHECK(a.defined(), "dropout: the input is undefined");
  VOLT_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return a;
  VOLT_CHECK(is_floating(a.dtype()), "dropout: input must be floating point, got ", dtype_name(a.dtype()));
  Generator& g = gen ? *gen : default_generator();
  Tensor x = a.detach().contiguous();
  // Four uniforms per Philox counter, the same stream layout rand() uses: dropout(p) on a generator at
  // (seed, offset) keeps element i exactly when rand_with_seed(shape, seed, offset)[i] >= p.
  const PhiloxArgs rng = philox_draw(g, x.device(), (static_cast<uint64_t>(x.numel()) + 3) / 4);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  Tensor mask = empty(x.shape(), DType::boolean, x.device());
  if (x.numel() > 0)
    backend::call<&backend::DropoutKernels::dropout_fwd>(x.device(), x.dtype(), out, mask, x, rng, p);
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  autograd::attach_differentiable(out, "DropoutBackward", {a}, [mask, scale](const std::vector<Tensor>& gr) {
    return std::vector<Tensor>{dropout_grad(gr[0], mask, scale)};
  });
  return out;
}

}  // namespace volt
