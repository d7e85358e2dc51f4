#pragma once
// The dtype and flag dispatch of the fused RMSprop, Adagrad and Lion updates, written once for both backends (as
// optim_dispatch.h is for SGD and Adam). A backend passes a launcher with one member template that runs one
// update functor (kernels/common/optim_math_extra.h) over every listed tensor:
//   template <class T, class M, class Op>
//   void run(const std::vector<StatePointers<T, M>>& list, const Op& op) const;
// (the CPU one loops, the CUDA one launches one chunked kernel per kernels/common/multi_tensor.h plan). T: the
// parameter's storage type; M: the state's (acc_t<T>, or T for f16/bf16 parameters whose optimizer keeps
// low-precision state); Op::kStates of state[] are set, in the functor's order. Host code only; the ops
// (kernels/ops/optim_ops.cpp) have checked that every entry matches the first.
#include <array>
#include <vector>

#include <volt/kernels/common/optim_dispatch.h>
#include <volt/kernels/common/optim_math_extra.h>

namespace volt::optim_math {

template <class T, class M>
struct StatePointers {
  T* p;
  const T* g;
  M* state[kMaxStates];  ///< the used ones first; the rest null
  int64_t n;
};

// The used state tensors of one entry, in the functor's order.
struct StateList {
  std::array<const Tensor*, kMaxStates> t{};
  int count = 0;
  void add(const Tensor& x) { t[static_cast<size_t>(count++)] = &x; }
};

// Calls body(S{}, run) with run(op) launching `op` (an update functor of arithmetic type S = acc_t<T>) over the
// entries of `list`; states_of(entry) lists an entry's used state tensors.
template <class Launcher, class Entry, class StatesOf, class Body>
void dispatch_state_update(const Launcher& launch, const char* name, const std::vector<Entry>& list,
                           StatesOf&& states_of, Body&& body) {
  if (list.empty()) return;
  const Entry& first = list.front();
  const StateList first_states = states_of(first);
  dispatch_floating(first.param.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    with_state_type<T>(first_states.t[0]->dtype() == first.param.dtype(), [&](auto mtag) {
      using M = decltype(mtag);
      std::vector<StatePointers<T, M>> ptrs;
      ptrs.reserve(list.size());
      for (const Entry& e : list) {
        if (e.param.numel() == 0) continue;
        StatePointers<T, M> sp{static_cast<T*>(e.param.data_ptr()), static_cast<const T*>(e.grad.data_ptr()), {},
                               e.param.numel()};
        const StateList st = states_of(e);
        for (int k = 0; k < st.count; ++k) sp.state[k] = static_cast<M*>(st.t[static_cast<size_t>(k)]->data_ptr());
        ptrs.push_back(sp);
      }
      if (ptrs.empty()) return;
      body(S{}, [&](const auto& op) { launch.template run<T, M>(ptrs, op); });
    });
  });
}

template <class Launcher>
void dispatch_rmsprop(const Launcher& launch, const std::vector<RmspropTensors>& list, const RmspropHyper& h) {
  const bool momentum = h.momentum != 0.0;
  auto states = [&](const RmspropTensors& e) {
    StateList l;
    l.add(e.square_avg);
    if (momentum) l.add(e.momentum_buffer);
    if (h.centered) l.add(e.grad_avg);
    return l;
  };
  dispatch_state_update(launch, "rmsprop_step", list, states, [&](auto stag, auto&& run) {
    using S = decltype(stag);
    const auto s = make_rmsprop_scalars<S>(h);
    with_bool(h.weight_decay != 0.0, [&](auto decay) {
      with_bool(momentum, [&](auto mom) {
        with_bool(h.centered, [&](auto centered) {
          run(RmspropUpdate<S, decltype(decay)::value, decltype(mom)::value, decltype(centered)::value>{s});
        });
      });
    });
  });
}

template <class Launcher>
void dispatch_adagrad(const Launcher& launch, const std::vector<AdagradTensors>& list, const AdagradHyper& h) {
  auto states = [](const AdagradTensors& e) {
    StateList l;
    l.add(e.sum);
    return l;
  };
  dispatch_state_update(launch, "adagrad_step", list, states, [&](auto stag, auto&& run) {
    using S = decltype(stag);
    const auto s = make_adagrad_scalars<S>(h);
    with_bool(h.weight_decay != 0.0, [&](auto decay) { run(AdagradUpdate<S, decltype(decay)::value>{s}); });
  });
}

template <class Launcher>
void dispatch_lion(const Launcher& launch, const std::vector<LionTensors>& list, const LionHyper& h) {
  auto states = [](const LionTensors& e) {
    StateList l;
    l.add(e.exp_avg);
    return l;
  };
  dispatch_state_update(launch, "lion_step", list, states, [&](auto stag, auto&& run) {
    using S = decltype(stag);
    const auto s = make_lion_scalars<S>(h);
    with_bool(h.weight_decay != 0.0, [&](auto decay) { run(LionUpdate<S, decltype(decay)::value>{s}); });
  });
}

}  // namespace volt::optim_math
