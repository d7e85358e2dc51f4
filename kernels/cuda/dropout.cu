// CUDA dropout: Philox keep masks (nnmath::dropout_keep, bit-identical to the CPU) and the backward, one
// grid-stride pass each.
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {

template <class T>
__global__ void dropout_fwd_kernel(const T* in, T* out, bool* mask, int64_t n, PhiloxArgs rng,
                                   float p, acc_t<T> scale) {
  using A = acc_t<T>;
  const uint64_t seed = rng.key(), offset = rng.first();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = nnmath::dropout_keep(seed, offset, static_cast<uint64_t>(e), p);
    mask[e] = keep;
    out[e] = keep ? T(A(in[e]) * scale) : T(A(0));
  }
}

template <class T>
__global__ void dropout_bwd_kernel(const T* go, const bool* mask, T* gi, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    gi[e] = mask[e] ? T(A(go[e]) * scale) : T(A(0));
}

void dropout_fwd(const Tensor& out, const Tensor& mask, const Tensor& in, PhiloxArgs rng, double p) {
  const int64_t n = in.numel();
  if (n == 0) return;
  dispatch_floating(in.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A scale = p < 1.0 ? A(1.0 / (1.0 - p)) : A(0);
    dropout_fwd_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), static_cast<bool*>(mask.data_ptr()), n,
        rng, static_cast<float>(p), scale);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void dropout_bwd(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  const int64_t n = grad_out.numel();
  if (n == 0) return;
  dispatch_floating(grad_out.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    dropout_bwd_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(
        static_cast<const T*>(grad_out.data_ptr()), static_cast<const bool*>(mask.data_ptr()),
        static_cast<T*>(grad_in.data_ptr()), n, A(scale));
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::DropoutKernels dropout_kernels{
    .dropout_fwd = {dropout_fwd, backend::kFloating},
    .dropout_bwd = {dropout_bwd, backend::kFloating},
};

}  // namespace volt::cuda
