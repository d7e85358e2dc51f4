#pragma once
// Per-element optimizer updates shared by the CPU loops (kernels/cpu/optim.cpp) and the CUDA kernels
// (kernels/cuda/optim.cu). Each function updates one parameter element and its state in registers; the
// callers load/store in the storage types. A is the arithmetic type (float for f32/f16/bf16, double for f64).
//
// The formulas follow PyTorch's documented single-tensor algorithms (torch.optim.SGD / Adam / AdamW).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <volt/kernels/common/half.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/common/philox.h>
#include <volt/kernels/optim_hyper.h>

namespace volt {

namespace optim_math {

VOLT_HD float sqrt_(float x) { return ::sqrtf(x); }
VOLT_HD double sqrt_(double x) { return ::sqrt(x); }
template <class A> VOLT_HD A max_(A a, A b) { return a < b ? b : a; }

template <class A>
struct AdamScalars {
  A lr, beta1, beta2, eps, weight_decay;
  A one_minus_beta1, one_minus_beta2;
  A step_size;              // lr / (1 - beta1^t)
  A inv_bias_correction2_sqrt;  // 1 / sqrt(1 - beta2^t)
  A decay_factor;           // AdamW: 1 - lr * weight_decay
  uint64_t step = 1;        // the step taken (stochastic rounding's counter)
  uint64_t rounding_seed = 0;
  bool stochastic_rounding = false;  // bf16 parameters only (store_param)
};

template <class A>
inline AdamScalars<A> make_adam_scalars(const AdamHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  AdamScalars<A> s;
  s.lr = A(h.lr);
  s.beta1 = A(h.beta1);
  s.beta2 = A(h.beta2);
  s.eps = A(h.eps);
  s.weight_decay = A(h.weight_decay);
  s.one_minus_beta1 = A(1.0 - h.beta1);
  s.one_minus_beta2 = A(1.0 - h.beta2);
  s.step_size = A(h.lr / bc1);
  s.inv_bias_correction2_sqrt = A(1.0 / std::sqrt(bc2));
  s.decay_factor = A(1.0 - h.lr * h.weight_decay);
  s.step = static_cast<uint64_t>(h.step);
  s.rounding_seed = h.rounding_seed;
  s.stochastic_rounding = h.stochastic_rounding;
  return s;
}

// One Adam(W) update. kDecay: weight_decay != 0; kDecoupled: AdamW; kAms: amsgrad (vmax holds max(v)).
// Flags are template parameters so that the CPU loop has no branches and vectorises.
template <class A, bool kDecay, bool kDecoupled, bool kAms>
VOLT_HD void adam_update(A& p, A g, A& m, A& v, A& vmax, const AdamScalars<A>& s) {
  if constexpr (kDecay) {
    if constexpr (kDecoupled) p = p * s.decay_factor;
    else g = g + s.weight_decay * p;
  }
  m = m + s.one_minus_beta1 * (g - m);  // m.lerp_(g, 1 - beta1)
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  A vhat = v;
  if constexpr (kAms) {
    vmax = max_(vmax, v);
    vhat = vmax;
  }
  const A denom = sqrt_(vhat) * s.inv_bias_correction2_sqrt + s.eps;
  p = p - s.step_size * m / denom;
}

// Stochastic rounding of f to bf16 with 32 random bits r: the 16 bits bf16 drops are added to r's low 16 bits
// and truncated, so f rounds up with probability (dropped bits) / 2^16, and the expected result is f exactly.
// Infinities and NaN convert as round-to-nearest does.
VOLT_HD uint16_t float_to_bf16_bits_stochastic(float f, uint32_t r) {
  uint32_t x = detail::f32_bits(f);
  if ((x & 0x7f800000u) == 0x7f800000u) return float_to_bf16_bits(f);
  x += r & 0xffffu;
  return static_cast<uint16_t>(x >> 16);
}

// The random bits for element i of the tensor keyed `key` at optimizer step `step` (one Philox call gives the
// bits of four consecutive elements; each element takes its own word).
VOLT_HD uint32_t rounding_bits(uint64_t seed, uint64_t key, uint64_t step, int64_t i) {
  const uint64_t k = seed ^ (key * 0x9E3779B97F4A7C15ull);
  const philox::U4 r = philox::philox4x32_10(static_cast<uint64_t>(i) >> 2, step, k);
  return r.x[i & 3];
}

// Stores an updated parameter value: bf16 with stochastic rounding when the scalars ask for it, else the usual
// round-to-nearest conversion.
template <class T, class A, class Scalars>
VOLT_HD T store_param(A value, const Scalars& s, uint64_t key, int64_t i) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (s.stochastic_rounding) {
      BFloat16 out;
      out.bits = float_to_bf16_bits_stochastic(static_cast<float>(value),
                                               rounding_bits(s.rounding_seed, key, s.step, i));
      return out;
    }
  }
  return T(value);
}

template <class A>
struct SgdScalars {
  A lr, momentum, one_minus_dampening, weight_decay;
};

template <class A>
inline SgdScalars<A> make_sgd_scalars(const SgdHyper& h) {
  return {A(h.lr), A(h.momentum), A(1.0 - h.dampening), A(h.weight_decay)};
}

// A graph-captured update's scalars (kernels/graph.h): a block of device memory the host fills before every
// replay with both arithmetic types' scalars; the kernel reads those of its parameters' arithmetic type.
struct DynamicAdamScalars {
  AdamScalars<double> d;
  AdamScalars<float> f;
};
struct DynamicSgdScalars {
  SgdScalars<double> d;
  SgdScalars<float> f;
};
// The scalars of arithmetic type A inside a dynamic block (a device address: no dereference here), or nullptr.
template <class A>
inline const AdamScalars<A>* adam_scalars_in(const void* block) {
  if (block == nullptr) return nullptr;
  const auto* d = static_cast<const DynamicAdamScalars*>(block);
  if constexpr (std::is_same_v<A, double>) return &d->d;
  else return &d->f;
}
template <class A>
inline const SgdScalars<A>* sgd_scalars_in(const void* block) {
  if (block == nullptr) return nullptr;
  const auto* d = static_cast<const DynamicSgdScalars*>(block);
  if constexpr (std::is_same_v<A, double>) return &d->d;
  else return &d->f;
}

// One SGD update. kMomentum: momentum != 0 (buf is the momentum buffer); first: buf is uninitialised.
template <class A, bool kDecay, bool kMomentum, bool kNesterov>
VOLT_HD void sgd_update(A& p, A g, A& buf, bool first, const SgdScalars<A>& s) {
  if constexpr (kDecay) g = g + s.weight_decay * p;
  if constexpr (kMomentum) {
    buf = first ? g : s.momentum * buf + s.one_minus_dampening * g;
    if constexpr (kNesterov) g = g + s.momentum * buf;
    else g = buf;
  }
  p = p - s.lr * g;
}

// GradScaler's unscale of one gradient element: g *= inv_scale; returns whether g was inf or NaN (x - x is 0
// exactly for every finite x, NaN for inf and NaN). The scaled value is not checked separately: a finite
// gradient times 1/scale (scale >= 2^-24 in practice) stays finite or underflows to 0.
template <class A>
VOLT_HD bool unscale_update(A& g, A inv_scale) {
  const bool bad = !(g - g == A(0));
  g = g * inv_scale;
  return bad;
}

// Gradient-norm partials (norm_partial): each element contributes norm_term(|x|) and partials combine with
// norm_combine, in double. NormKind::max: the infinity norm, where NaN wins over every number (as torch's
// inf-norm); the sums propagate NaN by themselves.
enum class NormKind : int { two, one, power, max };
inline NormKind norm_kind(double p) {
  return p == 2.0 ? NormKind::two : p == 1.0 ? NormKind::one : std::isinf(p) ? NormKind::max : NormKind::power;
}
VOLT_HD double norm_term(double x, NormKind k, double p) {
  const double a = x < 0 ? -x : x;
  switch (k) {
    case NormKind::two: return x * x;
    case NormKind::one: return a;
    case NormKind::max: return a;
    default: return ::pow(a, p);
  }
}
VOLT_HD double norm_combine(double acc, double v, NormKind k) {
  if (k != NormKind::max) return acc + v;
  return (acc != acc || v != v) ? (acc != acc ? acc : v) : (v > acc ? v : acc);
}

// Calls f(std::integral_constant<bool, b>...) so that runtime flags select a template instantiation.
template <class F>
void with_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

}  // namespace optim_math
}  // namespace volt
