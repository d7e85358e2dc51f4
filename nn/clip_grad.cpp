#include "nn/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/dispatch.h"

namespace volt::nn {

namespace {

// sum |g|^p (or max |g| when p is infinite) of one gradient, in double.
double partial_norm(const Tensor& grad, double p) {
  const bool inf = std::isinf(p);
  if (grad.device().is_cpu()) {
    Tensor g = grad.contiguous();
    const int64_t n = g.numel();
    double acc = 0.0;
    dispatch_floating(g.dtype(), "clip_grad_norm_", [&](auto tag) {
      using T = decltype(tag);
      const T* d = static_cast<const T*>(g.data_ptr());
      if (inf) {
        for (int64_t i = 0; i < n; ++i) acc = std::max(acc, std::abs(static_cast<double>(d[i])));
      } else if (p == 2.0) {
        for (int64_t i = 0; i < n; ++i) {
          const double x = static_cast<double>(d[i]);
          acc += x * x;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(d[i])), p);
      }
    });
    return acc;
  }
  Tensor a = abs(grad.to(DType::f64));
  return inf ? max(a).item() : sum(pow(a, p)).item();
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  VOLT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive (or INFINITY), got ", norm_type);
  VOLT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const bool inf = std::isinf(norm_type);
  double total = 0.0;
  for (const auto& g : grads) {
    double part = partial_norm(g, norm_type);
    total = inf ? std::max(total, part) : total + part;
  }
  if (!inf) total = std::pow(total, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0 || std::isnan(coef)) {
    for (auto& g : grads) mul_(g, coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  VOLT_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard ng;
  for (const auto& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace volt::nn
