#pragma once
// Per-element math of softmax, the fused cross-entropy / NLL losses, arg-reductions and dropout, shared by the
// CPU loops (kernels/cpu/softmax.cpp, loss.cpp, dropout.cpp, reduce.cpp) and the CUDA kernels (kernels/cuda/*.cu).
// Everything computes in the accumulation type A (float for f32/f16/bf16, double for f64).
#include <cstdint>

#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/common/philox.h>
#include <volt/runtime/index_check.h>

namespace volt {

// How the fused loss kernels reduce the per-row losses.
enum class LossReduction : uint8_t { Mean, Sum, None };

// Parameters of the fused class-index loss. A "row" is one (sample, spatial position) pair: logits are laid
// out as (N, C, inner) and the target as (N, inner).
struct CeParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // epsilon in [0, 1]
  LossReduction reduction = LossReduction::Mean;
  bool nll = false;  // true: the input already holds log-probabilities (nll_loss); no log-sum-exp is taken
  IndexCheck check;  // the op the CUDA kernels record a bad target for (runtime/index_check.h)
};

namespace nnmath {

// x is +inf or -inf (NaN is not). Written with comparisons so it means the same in host and device code.
template <class A>
VOLT_HD bool is_inf(A x) { return x == x && x - x != x - x; }

// Online log-sum-exp: running maximum m and sum s of exp(x - m), starting from m = -inf, s = 0. Merging keeps
// every exp argument <= 0, so nothing overflows; -inf inputs contribute 0, so a row of only -inf ends with
// s = 0 (lse = -inf), not NaN.
template <class A>
VOLT_HD void lse_push(A& m, A& s, A x) {
  if (x > m) {
    s = s * em::exp_(m - x) + A(1);
    m = x;
  } else if (!(x == m && is_inf(m))) {  // skip x = m = -inf (or +inf), whose difference would be NaN
    s += em::exp_(x - m);
  }
}
// Merges another state (m2, s2) into (m, s), as if its inputs had been pushed: a NaN pushed into either state
// (it leaves s = NaN) stays NaN, and two states whose maximum is the same infinity add their counts instead of
// taking exp(inf - inf).
template <class A>
VOLT_HD void lse_merge(A& m, A& s, A m2, A s2) {
  if (m2 > m) {
    s = s * em::exp_(m - m2) + s2;
    m = m2;
  } else if (s2 != s2) {
    s = s2;
  } else if (s2 > A(0)) {
    s += m2 == m && is_inf(m) ? s2 : s2 * em::exp_(m2 - m);
  }
}
template <class A>
VOLT_HD A lse_finish(A m, A s) { return m + em::log_(s); }

// Loss of one row with PyTorch's label-smoothing semantics: (1 - eps) * NLL + eps * mean_j(-log p_j)
//   = lse - (1 - eps) * x_t - eps / C * sum_j x_j.
// For nll (inputs are log-probabilities) lse is 0 and only the target term is used (no smoothing).
template <class A>
VOLT_HD A ce_row_loss(A lse, A x_target, A sum_x, int64_t C, A eps) {
  return lse - (A(1) - eps) * x_target - eps / A(C) * sum_x;
}

// d(row loss)/d(x_j) = softmax_j - (1 - eps) * [j == t] - eps / C.
template <class A>
VOLT_HD A ce_grad(A p, bool is_target, int64_t C, A eps) {
  return p - (is_target ? (A(1) - eps) : A(0)) - eps / A(C);
}

// "x is a better extremum than best": NaN wins (as in NumPy/PyTorch, a NaN anywhere propagates); ties keep the
// earlier index because only strictly better values replace.
template <class A>
VOLT_HD bool arg_better(A x, A best, bool is_max) {
  if (x != x) return best == best;
  return is_max ? x > best : x < best;
}

// Dropout keeps element i of a tensor when its Philox uniform (from the same stream as rand_with_seed) is at
// least p, so the mask depends only on (seed, offset, i) and is identical on CPU and CUDA.
VOLT_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return philox::uniform_at(seed, offset, i) >= p;
}

}  // namespace nnmath
}  // namespace volt
