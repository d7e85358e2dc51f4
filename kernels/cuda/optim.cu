// CUDA kernels of the fused optimizer updates: one grid-stride pass per parameter tensor; the per-element
// math is kernels/common/optim_math.h, the same functions the CPU loop calls.
#include "kernels/common/dispatch.h"
#include "kernels/cpu/optim_backend.h"
#include "kernels/cuda/loops.cuh"

namespace volt::cuda {

namespace om = optim_math;

namespace {

template <class T, class S, bool kDecay, bool kDecoupled, bool kAms>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, S* __restrict__ m, S* __restrict__ v,
                            S* __restrict__ vmax, int64_t n, om::AdamScalars<S> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    S pp = static_cast<S>(p[i]), mm = m[i], vv = v[i], vm = kAms ? vmax[i] : S(0);
    om::adam_update<S, kDecay, kDecoupled, kAms>(pp, static_cast<S>(g[i]), mm, vv, vm, s);
    p[i] = T(pp);
    m[i] = mm;
    v[i] = vv;
    if (kAms) vmax[i] = vm;
  }
}

template <class T, class S, bool kDecay, bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, S* __restrict__ buf, int64_t n, bool first,
                           om::SgdScalars<S> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    S pp = static_cast<S>(p[i]);
    S unused = S(0);
    S& b = kMomentum ? buf[i] : unused;
    om::sgd_update<S, kDecay, kMomentum, kNesterov>(pp, static_cast<S>(g[i]), b, first, s);
    p[i] = T(pp);
  }
}

}  // namespace

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  const int64_t n = param.numel();
  if (n == 0) return;
  cudaStream_t stream = compute_stream(param);
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = om::make_adam_scalars<S>(h);
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    S* m = static_cast<S*>(exp_avg.data_ptr());
    S* v = static_cast<S*>(exp_avg_sq.data_ptr());
    S* vmax = h.amsgrad ? static_cast<S*>(max_exp_avg_sq.data_ptr()) : nullptr;
    om::with_bool(h.weight_decay != 0.0, [&](auto decay) {
      om::with_bool(h.decoupled_weight_decay, [&](auto decoupled) {
        om::with_bool(h.amsgrad, [&](auto ams) {
          adam_kernel<T, S, decltype(decay)::value, decltype(decoupled)::value, decltype(ams)::value>
              <<<blocks_for(n), 256, 0, stream>>>(p, g, m, v, vmax, n, s);
        });
      });
    });
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h) {
  const int64_t n = param.numel();
  if (n == 0) return;
  cudaStream_t stream = compute_stream(param);
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = om::make_sgd_scalars<S>(h);
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    S* buf = h.momentum != 0.0 ? static_cast<S*>(momentum_buffer.data_ptr()) : nullptr;
    om::with_bool(h.weight_decay != 0.0, [&](auto decay) {
      om::with_bool(h.momentum != 0.0, [&](auto mom) {
        om::with_bool(h.nesterov, [&](auto nest) {
          sgd_kernel<T, S, decltype(decay)::value, decltype(mom)::value, decltype(nest)::value>
              <<<blocks_for(n), 256, 0, stream>>>(p, g, buf, n, h.first_step, s);
        });
      });
    });
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
