#include <volt/nn/losses.h>

#include <string>

#include <volt/kernels/grad.h>
#include <volt/runtime/autocast.h>

namespace volt::nn {

namespace {

// f16/bf16 to f32 under autocast (the losses are on PyTorch's fp32 list); a differentiable cast.
Tensor fp32(const Tensor& t) {
  const bool half = t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
  return half && autocast_enabled() ? cast(t, DType::f32) : t;
}

Tensor reduce(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::Mean: return mean(loss);
    case Reduction::Sum: return sum(loss);
    case Reduction::None: return loss;
  }
  return loss;
}

void check_input(const Tensor& t, const char* op, const char* name) {
  VOLT_CHECK(t.defined(), op, ": ", name, " is undefined");
  VOLT_CHECK(is_floating(t.dtype()), op, ": expected a floating-point ", name, " but got ", dtype_name(t.dtype()));
}

void check_same_device(const Tensor& input, const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) return;
  VOLT_CHECK(t.device() == input.device(), op, ": ", name, " is on ", t.device().str(), " but input is on ",
             input.device().str(), "; expected both on one device (move one with .to(device))");
}

// Whether `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

// input and target of one shape, weight-like tensors broadcastable to it without growing it.
void check_bce_args(const Tensor& input, const Tensor& target, const Tensor& weight, const Tensor& pos_weight,
                    const char* op) {
  check_input(input, op, "input");
  check_input(target, op, "target");
  VOLT_CHECK(target.shape() == input.shape(), op, ": target has shape ", target.shape_str(), " but input has shape ",
             input.shape_str(), "; expected the same shape");
  check_same_device(input, target, op, "target");
  for (auto [t, name] : {std::pair{&weight, "weight"}, std::pair{&pos_weight, "pos_weight"}}) {
    if (!t->defined()) continue;
    check_input(*t, op, name);
    check_same_device(input, *t, op, name);
    VOLT_CHECK(broadcasts_to(t->shape(), input.shape()), op, ": ", name, " has shape ",
               t->shape_str(), ", which does not broadcast to the input's shape ", input.shape_str());
  }
}

// A gradient brought to the shape and dtype of the input it is for.
Tensor fit(const Tensor& grad, const Tensor& like) {
  Tensor g = grad.shape() == like.shape() ? grad : sum_to(grad, like.shape());
  return g.dtype() == like.dtype() ? g : cast(g, like.dtype());
}

// log(1 + exp(-x)) without overflow: log(1 + exp(-|x|)) + max(-x, 0).
Tensor softplus_neg(const Tensor& x) { return add(log(add(exp(neg(abs(x))), 1.0)), relu(neg(x))); }

// log(x) clamped below at -100 (PyTorch's binary_cross_entropy), no gradient (formulas use their own).
Tensor clamped_log(const Tensor& x) { return clamp(log(x), -100.0, std::nullopt); }

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  check_input(input, op, "input");
  check_input(target, op, "target");
  check_same_device(input, target, op, "target");
  broadcast_shapes(input.shape(), target.shape(), op);
}

}  // namespace

Tensor binary_cross_entropy_with_logits(const Tensor& input_, const Tensor& target_, const Tensor& weight_,
                                        Reduction reduction, const Tensor& pos_weight_) {
  const char* op = "binary_cross_entropy_with_logits";
  check_bce_args(input_, target_, weight_, pos_weight_, op);
  const Tensor x = fp32(input_), t = fp32(target_), w = fp32(weight_), pw = fp32(pos_weight_);
  Tensor loss;
  {
    NoGradGuard no_grad;  // the forward value; the node below gives the gradients (exact at x = 0 too)
    Tensor sp = softplus_neg(x);
    loss = add(mul(rsub(t, 1.0), x), pw.defined() ? mul(add(mul(sub(pw, 1.0), t), 1.0), sp) : sp);
    if (w.defined()) loss = mul(loss, w);
  }
  const bool gx = x.requires_grad(), gt = t.requires_grad();
  const bool gw = w.defined() && w.requires_grad(), gpw = pw.defined() && pw.requires_grad();
  autograd::attach_differentiable(loss, "BinaryCrossEntropyWithLogitsBackward", {x, t, w, pw},
                                  [=](const std::vector<Tensor>& g) {
    Tensor gg = w.defined() ? mul(g[0], w) : g[0];
    Tensor dx, dt, dw, dpw;
    if (gx) {
      Tensor s = sigmoid(x);
      // d/dx = (1 + (pw - 1) t) sigmoid(x) - pw t; sigmoid(x) - t without pos_weight.
      Tensor d = pw.defined() ? sub(mul(add(mul(sub(pw, 1.0), t), 1.0), s), mul(pw, t)) : sub(s, t);
      dx = fit(mul(gg, d), x);
    }
    if (gt || gpw || gw) {
      Tensor sp = softplus_neg(x);
      if (gt) dt = fit(mul(gg, pw.defined() ? sub(mul(sub(pw, 1.0), sp), x) : neg(x)), t);
      if (gpw) dpw = fit(mul(gg, mul(t, sp)), pw);
      if (gw) {
        Tensor raw = add(mul(rsub(t, 1.0), x), pw.defined() ? mul(add(mul(sub(pw, 1.0), t), 1.0), sp) : sp);
        dw = fit(mul(g[0], raw), w);
      }
    }
    return std::vector<Tensor>{dx, dt, dw, dpw};
  });
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& x, const Tensor& t, const Tensor& w, Reduction reduction) {
  const char* op = "binary_cross_entropy";
  check_bce_args(x, t, w, Tensor(), op);
  VOLT_CHECK(!autocast_enabled(), op, ": unsafe under autocast (as in PyTorch): the probabilities typically come "
             "from a half-precision sigmoid, which rounds to 0 or 1; use binary_cross_entropy_with_logits on the "
             "logits (or compute this loss outside the autocast region)");
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = neg(add(mul(t, clamped_log(x)), mul(rsub(t, 1.0), clamped_log(rsub(x, 1.0)))));
    if (w.defined()) loss = mul(loss, w);
  }
  const bool gx = x.requires_grad(), gt = t.requires_grad(), gw = w.defined() && w.requires_grad();
  autograd::attach_differentiable(loss, "BinaryCrossEntropyBackward", {x, t, w}, [=](const std::vector<Tensor>& g) {
    Tensor gg = w.defined() ? mul(g[0], w) : g[0];
    Tensor dx, dt, dw;
    // PyTorch's formulas: (x - t) / max(x (1 - x), 1e-12) for the input, the clamped log-odds for the target.
    if (gx) dx = fit(mul(gg, div(sub(x, t), clamp(mul(x, rsub(x, 1.0)), 1e-12, std::nullopt))), x);
    if (gt) dt = fit(mul(gg, sub(clamped_log(rsub(x, 1.0)), clamped_log(x))), t);
    if (gw) dw = fit(mul(g[0], neg(add(mul(t, clamped_log(x)), mul(rsub(t, 1.0), clamped_log(rsub(x, 1.0)))))), w);
    return std::vector<Tensor>{dx, dt, dw};
  });
  return reduce(loss, reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  const char* op = "smooth_l1_loss";
  check_pair(input, target, op);
  VOLT_CHECK(beta >= 0, op, ": beta (", beta, ") must be >= 0");
  Tensor d = sub(fp32(input), fp32(target));
  Tensor ad = abs(d);
  if (beta == 0) return reduce(ad, reduction);
  return reduce(where(lt(ad, beta), mul(square(d), 0.5 / beta), sub(ad, 0.5 * beta)), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  const char* op = "huber_loss";
  check_pair(input, target, op);
  VOLT_CHECK(delta > 0, op, ": delta (", delta, ") must be > 0");
  Tensor d = sub(fp32(input), fp32(target));
  Tensor ad = abs(d);
  return reduce(where(lt(ad, delta), mul(square(d), 0.5), mul(sub(ad, 0.5 * delta), delta)), reduction);
}

Tensor kl_div(const Tensor& input_, const Tensor& target_, std::string_view reduction, bool log_target) {
  const char* op = "kl_div";
  VOLT_CHECK(reduction == "mean" || reduction == "batchmean" || reduction == "sum" || reduction == "none", op,
             ": reduction must be \"mean\", \"batchmean\", \"sum\" or \"none\", got \"", std::string(reduction), "\"");
  check_pair(input_, target_, op);
  const Tensor input = fp32(input_), target = fp32(target_);
  Tensor loss;
  if (log_target) {
    loss = mul(exp(target), sub(target, input));
  } else {
    // target * log(target), 0 where target is 0 (xlogy): log reads 1 there, so neither value nor gradient is NaN.
    Tensor safe = where(gt(target, 0.0), target, scalar_tensor(1.0, target.dtype(), target.device()));
    loss = sub(mul(target, log(safe)), mul(target, input));
  }
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (reduction == "mean") return mean(loss);
  return input.dim() == 0 ? sum(loss) : div(sum(loss), static_cast<double>(input.size(0)));
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  return kl_div(input, target,
                reduction == Reduction::Mean ? "mean" : reduction == Reduction::Sum ? "sum" : "none", log_target);
}

Tensor cosine_similarity(const Tensor& x1_, const Tensor& x2_, int64_t dim, double eps) {
  const char* op = "cosine_similarity";
  check_input(x1_, op, "x1");
  check_input(x2_, op, "x2");
  VOLT_CHECK(x2_.device() == x1_.device(), op, ": x2 is on ", x2_.device().str(), " but x1 is on ",
             x1_.device().str(), "; expected both on one device");
  const Shape shape = broadcast_shapes(x1_.shape(), x2_.shape(), op);
  VOLT_CHECK(!shape.empty(), op, ": expected inputs with at least one dim, got x1 ", x1_.shape_str(), " and x2 ",
             x2_.shape_str());
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()), op);
  VOLT_CHECK(eps >= 0, op, ": eps (", eps, ") must be >= 0");
  const Tensor x1 = fp32(x1_), x2 = fp32(x2_);
  // max(||x||, eps) as sqrt(max(||x||^2, eps^2)): no 0/0 in the gradient of a zero vector.
  auto norm = [&](const Tensor& x) { return sqrt(clamp(sum(square(x), {d}, true), eps * eps, std::nullopt)); };
  // Norms over the broadcast shape, as PyTorch (a broadcast dim d counts each value shape[d] times).
  auto expanded = [&](const Tensor& x) {
    if (x.shape() == shape) return x;
    Shape padded(shape.size() - static_cast<size_t>(x.dim()), 1);
    padded.insert(padded.end(), x.shape().begin(), x.shape().end());
    return x.reshape(padded).expand(shape);
  };
  const Tensor e1 = expanded(x1), e2 = expanded(x2);
  return sum(mul(div(e1, norm(e1)), div(e2, norm(e2))), {d});
}

}  // namespace volt::nn
