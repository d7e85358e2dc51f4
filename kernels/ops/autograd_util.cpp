// Registers the tensor operations the autograd engine needs. This file also holds sum_to, which every
// broadcasting backward formula calls, so it is linked into any program that builds a graph.
#include <cmath>

#include <volt/kernels/ops.h>

namespace volt {

namespace {
struct RegisterEngineOps {
  RegisterEngineOps() {
    auto& ops = autograd::engine_ops();
    ops.add = [](const Tensor& a, const Tensor& b) { return add(a, b); };
    ops.ones_like = [](const Tensor& t) { return ones_like(t); };
    ops.zeros = [](const Shape& s, DType d, Device dev) { return zeros(s, d, dev); };
    ops.clone = [](const Tensor& t) { return t.clone(); };
    ops.cast = [](const Tensor& t, DType d) { return t.to(d); };
    ops.all_finite = [](const Tensor& t) {
      if (!is_floating(t.dtype()) || t.numel() == 0) return true;
      NoGradGuard ng;
      Tensor x = t.detach().to(DType::f32);
      // x - x is 0 for finite values and NaN for NaN and +-Inf: one reduction answers both questions.
      return std::isfinite(sum(sub(x, x)).item<float>());
    };
  }
} register_engine_ops;
}  // namespace

namespace detail {
void no_cuda_backend(const char* fn) {
  VOLT_FAIL(fn, ": a CUDA tensor reached an op but Volt was built without the CUDA backend");
}
}  // namespace detail

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  VOLT_ASSERT(lead >= 0, "sum_to: target has more dims than the gradient");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && grad.shape()[i] != 1) dims.push_back(i);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

}  // namespace volt
