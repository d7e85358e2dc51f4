// CUDA kernels of the fused optimizer updates: one grid-stride pass per parameter tensor; the per-element
// math is kernels/common/optim_math.h, the same functions the CPU loop calls.
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/optim_dispatch.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace om = optim_math;

namespace {

template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, M* __restrict__ m, M* __restrict__ v,
                            M* __restrict__ vmax, int64_t n, om::AdamScalars<S> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    S pp = static_cast<S>(p[i]), mm = static_cast<S>(m[i]), vv = static_cast<S>(v[i]);
    S vm = kAms ? static_cast<S>(vmax[i]) : S(0);
    om::adam_update<S, kDecay, kDecoupled, kAms>(pp, static_cast<S>(g[i]), mm, vv, vm, s);
    p[i] = T(pp);
    m[i] = M(mm);
    v[i] = M(vv);
    if (kAms) vmax[i] = M(vm);
  }
}

template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, M* __restrict__ buf, int64_t n, bool first,
                           om::SgdScalars<S> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    S pp = static_cast<S>(p[i]);
    S b = kMomentum ? static_cast<S>(buf[i]) : S(0);
    om::sgd_update<S, kDecay, kMomentum, kNesterov>(pp, static_cast<S>(g[i]), b, first, s);
    p[i] = T(pp);
    if (kMomentum) buf[i] = M(b);
  }
}

template <class T, class S>
__global__ void unscale_check_kernel(T* __restrict__ g, int64_t n, S inv, float* __restrict__ found) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    S v = static_cast<S>(g[i]);
    bad |= om::unscale_update(v, inv);
    g[i] = T(v);
  }
  // Every writer stores the same value, so the unsynchronised store is benign; a warp vote keeps it to one
  // store per warp.
  if (__any_sync(__activemask(), bad) && bad) *found = 1.0f;
}

struct GpuLauncher {
  cudaStream_t stream;
  template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
  void adam(T* p, const T* g, M* m, M* v, M* vmax, int64_t n, const om::AdamScalars<S>& s) const {
    adam_kernel<T, M, S, kDecay, kDecoupled, kAms><<<blocks_for(n), 256, 0, stream>>>(p, g, m, v, vmax, n, s);
    VOLT_CUDA_CHECK_LAUNCH();
  }
  template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
  void sgd(T* p, const T* g, M* buf, int64_t n, bool first, const om::SgdScalars<S>& s) const {
    sgd_kernel<T, M, S, kDecay, kMomentum, kNesterov><<<blocks_for(n), 256, 0, stream>>>(p, g, buf, n, first, s);
    VOLT_CUDA_CHECK_LAUNCH();
  }
};

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  om::dispatch_adam(GpuLauncher{compute_stream(param)}, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, h);
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h) {
  om::dispatch_sgd(GpuLauncher{compute_stream(param)}, param, grad, momentum_buffer, h);
}

void unscale_check(const Tensor& grad, double inv_scale, const Tensor& found) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  dispatch_floating(grad.dtype(), "unscale_check", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    unscale_check_kernel<T, S><<<blocks_for(n), 256, 0, compute_stream(grad)>>>(
        static_cast<T*>(grad.data_ptr()), n, static_cast<S>(inv_scale), static_cast<float*>(found.data_ptr()));
    VOLT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

constexpr backend::OptimKernels optim_kernels{
    .adam_step = {adam_step, backend::kFloating},
    .sgd_step = {sgd_step, backend::kFloating},
    .unscale_check = {unscale_check, backend::kFloating},
};

}  // namespace volt::cuda
