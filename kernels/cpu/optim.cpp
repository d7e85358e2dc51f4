// CPU loops of the fused optimizer updates: the per-element math is kernels/common/optim_math.h; here only
// loads, stores and a branch-free inner loop per flag combination (so the compiler vectorises it).
#include "kernels/common/dispatch.h"
#include "kernels/cpu/optim_backend.h"

namespace volt::cpu {

namespace om = optim_math;

namespace {

template <class T, class S, bool kDecay, bool kDecoupled, bool kAms>
void adam_loop(T* __restrict p, const T* __restrict g, S* __restrict m, S* __restrict v, S* __restrict vmax,
               int64_t n, const om::AdamScalars<S>& s) {
  for (int64_t i = 0; i < n; ++i) {
    S pp = static_cast<S>(p[i]), mm = m[i], vv = v[i], vm = kAms ? vmax[i] : S(0);
    om::adam_update<S, kDecay, kDecoupled, kAms>(pp, static_cast<S>(g[i]), mm, vv, vm, s);
    p[i] = T(pp);
    m[i] = mm;
    v[i] = vv;
    if constexpr (kAms) vmax[i] = vm;
  }
}

template <class T, class S, bool kDecay, bool kMomentum, bool kNesterov>
void sgd_loop(T* __restrict p, const T* __restrict g, S* __restrict buf, int64_t n, bool first,
              const om::SgdScalars<S>& s) {
  S unused = S(0);
  for (int64_t i = 0; i < n; ++i) {
    S pp = static_cast<S>(p[i]);
    S& b = kMomentum ? buf[i] : unused;
    om::sgd_update<S, kDecay, kMomentum, kNesterov>(pp, static_cast<S>(g[i]), b, first, s);
    p[i] = T(pp);
  }
}

}  // namespace

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  const int64_t n = param.numel();
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
          adam_loop<T, S, decltype(decay)::value, decltype(decoupled)::value, decltype(ams)::value>(p, g, m, v, vmax,
                                                                                                   n, s);
        });
      });
    });
  });
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h) {
  const int64_t n = param.numel();
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
          sgd_loop<T, S, decltype(decay)::value, decltype(mom)::value, decltype(nest)::value>(p, g, buf, n,
                                                                                              h.first_step, s);
        });
      });
    });
  });
}

}  // namespace volt::cpu
