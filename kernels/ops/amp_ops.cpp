// Mixed-precision support ops: the GradScaler's fused unscale and non-finite check.
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
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (g.is_contiguous()) {
      backend::call<&backend::OptimKernels::unscale_check>(g.device(), g.dtype(), g, inv_scale, found);
    } else {  // a strided gradient (rare): work on a packed copy and write it back
      Tensor c = g.contiguous();
      backend::call<&backend::OptimKernels::unscale_check>(g.device(), c.dtype(), c, inv_scale, found);
      Tensor dst = g;
      dst.copy_(c);
    }
  }
  return found;
}

}  // namespace volt
