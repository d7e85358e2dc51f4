#pragma once
// The per-element math of the fused linear layer (kernels/ops/linalg_ops.cpp: linear with an Activation), shared
// by the CPU pass (kernels/cpu/linear_act.cpp) and the CUDA kernels (kernels/cuda/linear_act.cu):
//   forward:  z = acc + bias; out = act(z)            (pre = z is kept when the backward needs it)
//   backward: grad_pre = grad_out * act'(z)           (and grad_bias = column sums of grad_pre)
// The backward reads the output for ReLU (out > 0 exactly where z > 0) and the pre-activation for the GELUs.
#include <type_traits>

#include <volt/kernels/activation.h>
#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/common/macros.h>

namespace volt::biasact {

// Whether the backward reads the pre-activation z (GELU, GELUTanh) or the output (ReLU); None reads neither.
constexpr bool saves_pre(Activation a) { return a == Activation::GELU || a == Activation::GELUTanh; }
constexpr bool saves_out(Activation a) { return a == Activation::ReLU; }

template <Activation act, class A>
VOLT_HD A forward(A z) {
  if constexpr (act == Activation::ReLU) return z > A(0) ? z : A(0);
  else if constexpr (act == Activation::GELU) return em::gelu_(z);
  else if constexpr (act == Activation::GELUTanh) return em::gelu_tanh_(z);
  else return z;
}

// d out / d z times the incoming gradient g; `saved` is the output (ReLU) or z (GELU, GELUTanh).
template <Activation act, class A>
VOLT_HD A backward(A g, A saved) {
  if constexpr (act == Activation::ReLU) return saved > A(0) ? g : A(0);
  else if constexpr (act == Activation::GELU) return g * em::gelu_grad_(saved);
  else if constexpr (act == Activation::GELUTanh) return g * em::gelu_tanh_grad_(saved);
  else return g;
}

// Calls f(std::integral_constant<Activation, act>{}): the activation becomes a template argument, so the
// element loops carry no switch.
template <class F>
void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::None: return f(std::integral_constant<Activation, Activation::None>{});
    case Activation::ReLU: return f(std::integral_constant<Activation, Activation::ReLU>{});
    case Activation::GELU: return f(std::integral_constant<Activation, Activation::GELU>{});
    case Activation::GELUTanh: return f(std::integral_constant<Activation, Activation::GELUTanh>{});
  }
}

}  // namespace volt::biasact
