#pragma once
// Per-element RMSprop, Adagrad and Lion updates, shared by the CPU loop (kernels/cpu/optim.cpp) and the CUDA
// kernel (kernels/cuda/optim.cu), as optim_math.h is for SGD and Adam. Each update is a small functor over one
// parameter element p, its gradient g and its state st[0..kStates) in the arithmetic type A (float for
// f32/f16/bf16, double for f64); the callers load and store in the storage types. Flags are template parameters
// so that the CPU loop has no branches.
//
// The formulas follow PyTorch's documented single-tensor algorithms (torch.optim.RMSprop, torch.optim.Adagrad)
// and, for Lion (not in torch.optim), the paper's and lion-pytorch's.
#include <cmath>

#include <volt/kernels/common/optim_math.h>
#include <volt/kernels/optim_extra_hyper.h>

namespace volt::optim_math {

// The most state tensors one of these updates keeps per parameter (RMSprop: square_avg, momentum_buffer,
// grad_avg).
inline constexpr int kMaxStates = 3;

// torch.sign: -1, 0 or 1, NaN for NaN.
template <class A>
VOLT_HD A sign_(A x) {
  return x > A(0) ? A(1) : x < A(0) ? A(-1) : x == x ? A(0) : x;
}

template <class A>
struct RmspropScalars {
  A lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
};
template <class A>
inline RmspropScalars<A> make_rmsprop_scalars(const RmspropHyper& h) {
  return {A(h.lr), A(h.alpha), A(1.0 - h.alpha), A(h.eps), A(h.weight_decay), A(h.momentum)};
}

// RMSprop. State: st[0] square_avg, then momentum_buffer (kMomentum), then grad_avg (kCentered).
template <class A, bool kDecay, bool kMomentum, bool kCentered>
struct RmspropUpdate {
  static constexpr int kStates = 1 + (kMomentum ? 1 : 0) + (kCentered ? 1 : 0);
  RmspropScalars<A> s;
  VOLT_HD void operator()(A& p, A g, A* st) const {
    if constexpr (kDecay) g = g + s.weight_decay * p;
    A& sq = st[0];
    sq = s.alpha * sq + s.one_minus_alpha * g * g;  // square_avg.mul_(alpha).addcmul_(g, g, 1 - alpha)
    A avg;
    if constexpr (kCentered) {
      A& ga = st[kMomentum ? 2 : 1];
      ga = ga + s.one_minus_alpha * (g - ga);  // grad_avg.lerp_(g, 1 - alpha)
      avg = sqrt_(sq - ga * ga) + s.eps;
    } else {
      avg = sqrt_(sq) + s.eps;
    }
    if constexpr (kMomentum) {
      A& buf = st[1];
      buf = s.momentum * buf + g / avg;  // buf.mul_(momentum).addcdiv_(g, avg)
      p = p - s.lr * buf;
    } else {
      p = p - s.lr * (g / avg);
    }
  }
};

template <class A>
struct AdagradScalars {
  A clr, eps, weight_decay;  // clr: this step's lr, lr / (1 + (step - 1) * lr_decay)
};
template <class A>
inline AdagradScalars<A> make_adagrad_scalars(const AdagradHyper& h) {
  return {A(h.lr / (1.0 + static_cast<double>(h.step - 1) * h.lr_decay)), A(h.eps), A(h.weight_decay)};
}

// Adagrad. State: st[0] sum.
template <class A, bool kDecay>
struct AdagradUpdate {
  static constexpr int kStates = 1;
  AdagradScalars<A> s;
  VOLT_HD void operator()(A& p, A g, A* st) const {
    if constexpr (kDecay) g = g + s.weight_decay * p;
    st[0] = st[0] + g * g;  // sum.addcmul_(g, g)
    p = p - s.clr * (g / (sqrt_(st[0]) + s.eps));
  }
};

template <class A>
struct LionScalars {
  A lr, beta1, one_minus_beta1, beta2, one_minus_beta2, decay_factor;  // decay_factor: 1 - lr * weight_decay
};
template <class A>
inline LionScalars<A> make_lion_scalars(const LionHyper& h) {
  return {A(h.lr), A(h.beta1), A(1.0 - h.beta1), A(h.beta2), A(1.0 - h.beta2), A(1.0 - h.lr * h.weight_decay)};
}

// Lion. State: st[0] exp_avg.
template <class A, bool kDecay>
struct LionUpdate {
  static constexpr int kStates = 1;
  LionScalars<A> s;
  VOLT_HD void operator()(A& p, A g, A* st) const {
    if constexpr (kDecay) p = p * s.decay_factor;
    A& m = st[0];
    const A c = s.beta1 * m + s.one_minus_beta1 * g;
    p = p - s.lr * sign_(c);
    m = s.beta2 * m + s.one_minus_beta2 * g;
  }
};

}  // namespace volt::optim_math
