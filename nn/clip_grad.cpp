#include <volt/nn/clip_grad.h>

#include <algorithm>
#include <cmath>

#include <volt/kernels/ops.h>

namespace volt::nn {

namespace {

std::vector<Tensor> collect_grads(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  VOLT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive (or INFINITY), got ", norm_type);
  VOLT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  return clip_grad_norm_no_sync_(params, max_norm, norm_type, nullptr);
}

Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                               const NormPartialReduce& reduce) {
  NoGradGuard ng;
  std::vector<Tensor> grads = collect_grads(params, max_norm, norm_type);
  Device dev = kCPU;
  for (const auto& p : params)
    if (p.defined()) {
      dev = p.device();
      break;
    }
  if (grads.empty() && !reduce) return zeros({}, DType::f64, dev);
  if (!grads.empty()) dev = grads[0].device();
  for (const auto& g : grads)
    VOLT_CHECK(g.device() == dev, "clip_grad_norm_: gradients on different devices (", dev.str(), " and ",
               g.device().str(), ")");
  Tensor total = grads.empty() ? zeros({}, DType::f64, dev) : multi_tensor_norm(grads, norm_type);
  if (reduce) {
    // The ranks' partial norms combine as sums of |g|^p (max for the infinity norm).
    const bool is_max = std::isinf(norm_type);
    Tensor partial = is_max ? total : norm_type == 2.0 ? mul(total, total) : pow(total, norm_type);
    reduce(partial, is_max);
    total = is_max ? partial : norm_type == 2.0 ? sqrt(partial) : pow(partial, 1.0 / norm_type);
  }
  if (grads.empty()) return total;
  // coef = min(max_norm / (total + 1e-6), 1); NaN stays NaN (clamp passes it through). Scaling by exactly 1
  // leaves every value (NaN, inf, -0 included) unchanged, so no host-side "coef < 1" test is needed.
  Tensor coef = clamp(rdiv(add(total, 1e-6), max_norm), std::nullopt, 1.0);
  // One launch per gradient dtype; the coefficient is rounded to each dtype once, as mul_ by it would.
  multi_tensor_scale_(grads, coef);
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  NoGradGuard ng;
  std::vector<Tensor> grads = collect_grads(params, max_norm, norm_type);
  if (grads.empty()) return 0.0;
  // Off the CPU: the device-side computation, then one read of the total.
  if (!grads[0].device().is_cpu()) return clip_grad_norm_no_sync_(params, max_norm, norm_type).item();
  for (const auto& g : grads)
    VOLT_CHECK(g.device().is_cpu(), "clip_grad_norm_: gradients on different devices (cpu and ", g.device().str(), ")");
  const double total = multi_tensor_norm(grads, norm_type).item();  // a CPU scalar: no device sync
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
