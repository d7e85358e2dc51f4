#pragma once
// The dtype and flag dispatch of the fused optimizer updates, written once for both backends. A backend passes
// a launcher object with two member templates that run one update over n contiguous elements:
//   template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
//   void adam(T* p, const T* g, M* m, M* v, M* vmax, int64_t n, const optim_math::AdamScalars<S>& s) const;
//   template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
//   void sgd(T* p, const T* g, M* buf, int64_t n, bool first, const optim_math::SgdScalars<S>& s) const;
// T: the parameter's storage type; S = acc_t<T>: the arithmetic type; M: the state's storage type, S by default
// and T for f16/bf16 parameters whose optimizer keeps low-precision state (fp32_state = false). The state
// tensors' dtype selects M.
// (the CPU one loops, the CUDA one launches a kernel). Host code only.
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/optim_math.h>
#include <volt/kernels/tensor.h>

namespace volt::optim_math {

// Calls f(M{}) with M = T when `low` (state stored in the parameter's own half type) and T is f16/bf16, else
// M = acc_t<T> (fp32 state for half parameters; for f32/f64 parameters the two are the same type).
template <class T, class F>
void with_state_type(bool low, F&& f) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    f(T{});
  } else {
    if (low) f(T{});
    else f(acc_t<T>{});
  }
}

template <class Launcher>
void dispatch_adam(const Launcher& launch, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = make_adam_scalars<S>(h);
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    with_state_type<T>(exp_avg.dtype() == param.dtype(), [&](auto mtag) {
      using M = decltype(mtag);
      M* m = static_cast<M*>(exp_avg.data_ptr());
      M* v = static_cast<M*>(exp_avg_sq.data_ptr());
      M* vmax = h.amsgrad ? static_cast<M*>(max_exp_avg_sq.data_ptr()) : nullptr;
      with_bool(h.weight_decay != 0.0, [&](auto decay) {
        with_bool(h.decoupled_weight_decay, [&](auto decoupled) {
          with_bool(h.amsgrad, [&](auto ams) {
            launch.template adam<T, M, S, decltype(decay)::value, decltype(decoupled)::value, decltype(ams)::value>(
                p, g, m, v, vmax, n, s);
          });
        });
      });
    });
  });
}

template <class Launcher>
void dispatch_sgd(const Launcher& launch, const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const SgdHyper& h) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = make_sgd_scalars<S>(h);
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    const bool low = momentum_buffer.defined() && momentum_buffer.dtype() == param.dtype();
    with_state_type<T>(low, [&](auto mtag) {
      using M = decltype(mtag);
      M* buf = h.momentum != 0.0 ? static_cast<M*>(momentum_buffer.data_ptr()) : nullptr;
      with_bool(h.weight_decay != 0.0, [&](auto decay) {
        with_bool(h.momentum != 0.0, [&](auto mom) {
          with_bool(h.nesterov, [&](auto nest) {
            launch.template sgd<T, M, S, decltype(decay)::value, decltype(mom)::value, decltype(nest)::value>(
                p, g, buf, n, h.first_step, s);
          });
        });
      });
    });
  });
}

}  // namespace volt::optim_math
