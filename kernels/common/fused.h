#pragma once
// Math of the fused ops of kernels/ops/fused_ops.cpp, shared by the CPU loops (kernels/cpu/norm.cpp, loss.cpp) and
// the CUDA kernels (kernels/cuda/norm.cu, loss.cu); contracts in kernels/backend/norm.h and loss.h:
//   residual_layer_norm: s = x + r, y = layer_norm(s); the per-row statistics and dx are those of
//                        kernels/common/norm.h, read from s;
//   classifier:          cross-entropy of a row of logits with its gradient in the same pass (the row's softmax
//                        is never stored), built on the log-sum-exp pieces of kernels/common/softmax.h.
// Everything computes in the accumulation type A (float for f32/f16/bf16, double for f64).
#include <cstdint>

#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/common/norm.h>
#include <volt/kernels/common/softmax.h>

namespace volt {

namespace fusedmath {

// s = x + r, added in A and rounded once to the storage type T, as add() rounds it: the statistics of the fused op
// are those of exactly the s it returns, so it matches add() followed by layer_norm(). r may be stored narrower than
// x (R: a bf16/f16 sublayer output joining an f32 stream), widened exactly as a cast to T would widen it.
template <class T, class A, class R = T>
VOLT_HD T residual_add(T x, R r) { return T(A(x) + A(r)); }

// The gradient reaching s: the layer-norm backward of dy (gw = dy * w, with the row means of gw and gw * xhat)
// plus ds_other, the gradient of s's other uses (the residual stream it continues as).
template <class A>
VOLT_HD A residual_norm_grad_s(A gw, A xhat, A rstd, A mean_gw, A mean_gwx, A ds_other) {
  return normmath::norm_backward_dx(gw, xhat, rstd, mean_gw, mean_gwx) + ds_other;
}

// The classifier's per-row loss and gradient, as cross_entropy's (label smoothing 0): for a row with log-sum-exp
// lse and target logit x_t, loss = lse - x_t; d loss / d x_j = (exp(x_j - lse) - [j == t]) * scale, where scale is
// the row's share of the reduction (1 / (number of counted rows) for a mean, 1 for a sum) times the upstream
// gradient. Ignored rows have zero loss and zero gradient.
template <class A>
VOLT_HD A classifier_row_loss(A lse, A x_target) { return lse - x_target; }

template <class A>
VOLT_HD A classifier_grad(A x, A lse, bool is_target, A scale) {
  return (em::exp_(x - lse) - (is_target ? A(1) : A(0))) * scale;
}

}  // namespace fusedmath
}  // namespace volt
