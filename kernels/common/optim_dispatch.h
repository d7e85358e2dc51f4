#pragma once
// The dtype and flag dispatch of the fused optimizer updates, written once for both backends. An update takes a
// list of parameters (one tensor for adam_step_/sgd_step_, a whole parameter group for the multi-tensor forms)
// that share one dtype, state dtype and set of flags; a backend passes a launcher object with two member
// templates that run one update over every listed tensor:
//   template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
//   void adam(const std::vector<AdamPointers<T, M>>& list, const optim_math::AdamScalars<S>& s,
//             const optim_math::AdamScalars<S>* dynamic) const;
//   template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
//   void sgd(const std::vector<SgdPointers<T, M>>& list, bool first, const optim_math::SgdScalars<S>& s,
//            const optim_math::SgdScalars<S>* dynamic) const;
// `dynamic`, when not null, is device memory holding the scalars to use instead of `s` (a graph-captured update
// whose learning rate and step the host refreshes before each replay; kernels/graph.h).
// (the CPU one loops over the tensors, the CUDA one launches one chunked kernel per kernels/common/multi_tensor.h
// plan). T: the parameter's storage type; S = acc_t<T>: the arithmetic type; M: the state's storage type, S by
// default and T for f16/bf16 parameters whose optimizer keeps low-precision state (fp32_state = false). The
// state tensors' dtype selects M. Host code only; the ops (kernels/ops/optim_ops.cpp) have checked that every
// entry matches the first.
#include <vector>

#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/optim_math.h>
#include <volt/kernels/optim_hyper.h>
#include <volt/kernels/tensor.h>

namespace volt::optim_math {

template <class T, class M>
struct AdamPointers {
  T* p;
  const T* g;
  M* m;
  M* v;
  M* vmax;  ///< null without amsgrad
  int64_t n;
  uint64_t key;  ///< stochastic rounding's per-tensor key (AdamTensors::index)
};

template <class T, class M>
struct SgdPointers {
  T* p;
  const T* g;
  M* buf;  ///< null without momentum
  int64_t n;
};

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
void dispatch_adam(const Launcher& launch, const std::vector<AdamTensors>& list, const AdamHyper& h,
                   const void* dynamic = nullptr) {
  if (list.empty()) return;
  const AdamTensors& first = list.front();
  dispatch_floating(first.param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = make_adam_scalars<S>(h);
    with_state_type<T>(first.exp_avg.dtype() == first.param.dtype(), [&](auto mtag) {
      using M = decltype(mtag);
      std::vector<AdamPointers<T, M>> ptrs;
      ptrs.reserve(list.size());
      for (const AdamTensors& a : list) {
        if (a.param.numel() == 0) continue;
        ptrs.push_back({static_cast<T*>(a.param.data_ptr()), static_cast<const T*>(a.grad.data_ptr()),
                        static_cast<M*>(a.exp_avg.data_ptr()), static_cast<M*>(a.exp_avg_sq.data_ptr()),
                        h.amsgrad ? static_cast<M*>(a.max_exp_avg_sq.data_ptr()) : nullptr, a.param.numel(),
                        static_cast<uint64_t>(a.index)});
      }
      if (ptrs.empty()) return;
      with_bool(h.weight_decay != 0.0, [&](auto decay) {
        with_bool(h.decoupled_weight_decay, [&](auto decoupled) {
          with_bool(h.amsgrad, [&](auto ams) {
            launch.template adam<T, M, S, decltype(decay)::value, decltype(decoupled)::value, decltype(ams)::value>(
                ptrs, s, adam_scalars_in<S>(dynamic));
          });
        });
      });
    });
  });
}

template <class Launcher>
void dispatch_sgd(const Launcher& launch, const std::vector<SgdTensors>& list, const SgdHyper& h,
                  const void* dynamic = nullptr) {
  if (list.empty()) return;
  const SgdTensors& first = list.front();
  dispatch_floating(first.param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const auto s = make_sgd_scalars<S>(h);
    const bool low = first.momentum_buffer.defined() && first.momentum_buffer.dtype() == first.param.dtype();
    with_state_type<T>(low, [&](auto mtag) {
      using M = decltype(mtag);
      std::vector<SgdPointers<T, M>> ptrs;
      ptrs.reserve(list.size());
      for (const SgdTensors& a : list) {
        if (a.param.numel() == 0) continue;
        ptrs.push_back({static_cast<T*>(a.param.data_ptr()), static_cast<const T*>(a.grad.data_ptr()),
                        h.momentum != 0.0 ? static_cast<M*>(a.momentum_buffer.data_ptr()) : nullptr,
                        a.param.numel()});
      }
      if (ptrs.empty()) return;
      with_bool(h.weight_decay != 0.0, [&](auto decay) {
        with_bool(h.momentum != 0.0, [&](auto mom) {
          with_bool(h.nesterov, [&](auto nest) {
            launch.template sgd<T, M, S, decltype(decay)::value, decltype(mom)::value, decltype(nest)::value>(
                ptrs, h.first_step, s, sgd_scalars_in<S>(dynamic));
          });
        });
      });
    });
  });
}

}  // namespace volt::optim_math
