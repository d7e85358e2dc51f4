// Mixed-precision support ops: the GradScaler's fused unscale and non-finite check.
#include <algorithm>
#include <cmath>

#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/ops.h>

namespace volt {

Tensor unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  trace::Range op_range(trace::Layer::op, "unscale_grads_");
  VOLT_CHECK(std::isfinite(inv_scale), "unscale_grads_: inv_scale must be finite, got ", inv_scale);
  const Tensor* first = nullptr;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    if (!first) first = &g;
    VOLT_CHECK(is_floating(g.dtype()), "unscale_grads_: gradients must be floating point, got ",
               dtype_name(g.dtype()));
    VOLT_CHECK(g.device() == first->device(), "unscale_grads_: gradients are on ", first->device().str(), " and ",
               g.device().str(), "; expected one device");
    VOLT_CHECK(!g.requires_grad(), "unscale_grads_: a gradient requires grad (unscale works in place on leaf "
               "gradients, outside autograd)");
  }
  Tensor found = zeros({}, DType::f32, first ? first->device() : kCPU);
  // One list (one launch on a GPU) per dtype of the contiguous gradients; a strided gradient (rare) is unscaled
  // as a packed copy and written back.
  std::vector<std::vector<Tensor>> by_dtype;
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (g.is_contiguous()) {
      auto it = std::find_if(by_dtype.begin(), by_dtype.end(), [&](const auto& l) { return l[0].dtype() == g.dtype(); });
      if (it == by_dtype.end()) by_dtype.push_back({g});
      else it->push_back(g);
    } else {
      Tensor c = g.contiguous();
      backend::call<&backend::OptimKernels::unscale_check>(g.device(), c.dtype(), std::vector<Tensor>{c}, inv_scale,
                                                           found);
      Tensor dst = g;
      dst.copy_(c);
    }
  }
  for (const auto& list : by_dtype)
    backend::call<&backend::OptimKernels::unscale_check>(list[0].device(), list[0].dtype(), list, inv_scale, found);
  return found;
}

}  // namespace volt
