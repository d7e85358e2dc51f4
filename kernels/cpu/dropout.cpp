// CPU dropout: Philox keep masks (nnmath::dropout_keep, bit-identical to the CUDA kernels) and the backward.
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>

namespace volt::cpu {

namespace {

void dropout_fwd(const Tensor& out, const Tensor& mask, const Tensor& in, PhiloxArgs rng, double p) {
  const uint64_t seed = rng.key(), offset = rng.first();
  dispatch_floating(in.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    bool* mk = static_cast<bool*>(mask.data_ptr());
    const A scale = p < 1.0 ? A(1.0 / (1.0 - p)) : A(0);
    const float pf = static_cast<float>(p);
    const int64_t n = in.numel();
    for (int64_t i = 0; i < n; ++i) {
      bool keep = nnmath::dropout_keep(seed, offset, static_cast<uint64_t>(i), pf);
      mk[i] = keep;
      y[i] = keep ? T(A(x[i]) * scale) : T(A(0));
    }
  });
}

void dropout_bwd(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  dispatch_floating(grad_out.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const bool* mk = static_cast<const bool*>(mask.data_ptr());
    T* o = static_cast<T*>(grad_in.data_ptr());
    const int64_t n = grad_out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = mk[i] ? T(A(g[i]) * A(scale)) : T(A(0));
  });
}

}  // namespace

constexpr backend::DropoutKernels dropout_kernels{
    .dropout_fwd = {dropout_fwd, backend::kFloating},
    .dropout_bwd = {dropout_bwd, backend::kFloating},
};

}  // namespace volt::cpu
