// CPU loops of the fused optimizer updates: the per-element math is kernels/common/optim_math.h; here only
// loads, stores and a branch-free inner loop per flag combination (so the compiler vectorises it).
//
// GCC does not vectorise sqrt while it may have to set errno (the default, and not switchable per function),
// so float Adam runs the same optim_math functions on an 8-lane AVX value type (F8) for the bulk of each
// tensor, and the scalar path for the tail.
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/optim_dispatch.h>
#include <volt/kernels/common/optim_extra_dispatch.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace volt::cpu {

namespace om = optim_math;

namespace {

#if defined(__AVX__)
// Eight floats with the arithmetic optim_math needs (found by argument-dependent lookup).
struct F8 {
  __m256 v;
  F8() = default;
  explicit F8(float x) : v(_mm256_set1_ps(x)) {}
  explicit F8(__m256 x) : v(x) {}
  static F8 load(const float* p) { return F8(_mm256_loadu_ps(p)); }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
};
inline F8 operator+(F8 a, F8 b) { return F8(_mm256_add_ps(a.v, b.v)); }
inline F8 operator-(F8 a, F8 b) { return F8(_mm256_sub_ps(a.v, b.v)); }
inline F8 operator*(F8 a, F8 b) { return F8(_mm256_mul_ps(a.v, b.v)); }
inline F8 operator/(F8 a, F8 b) { return F8(_mm256_div_ps(a.v, b.v)); }
inline F8 sqrt_(F8 a) { return F8(_mm256_sqrt_ps(a.v)); }
inline F8 max_(F8 a, F8 b) { return F8(_mm256_max_ps(a.v, b.v)); }

om::AdamScalars<F8> broadcast(const om::AdamScalars<float>& s) {
  om::AdamScalars<F8> o;
  o.lr = F8(s.lr);
  o.beta1 = F8(s.beta1);
  o.beta2 = F8(s.beta2);
  o.eps = F8(s.eps);
  o.weight_decay = F8(s.weight_decay);
  o.one_minus_beta1 = F8(s.one_minus_beta1);
  o.one_minus_beta2 = F8(s.one_minus_beta2);
  o.step_size = F8(s.step_size);
  o.inv_bias_correction2_sqrt = F8(s.inv_bias_correction2_sqrt);
  o.decay_factor = F8(s.decay_factor);
  return o;
}
#endif

template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
void adam_loop(T* __restrict p, const T* __restrict g, M* __restrict m, M* __restrict v, M* __restrict vmax,
               int64_t n, uint64_t key, const om::AdamScalars<S>& s) {
  int64_t i = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<M, float>) {
    const om::AdamScalars<F8> s8 = broadcast(s);
    for (; i + 8 <= n; i += 8) {
      F8 pp = F8::load(p + i), mm = F8::load(m + i), vv = F8::load(v + i), vm = kAms ? F8::load(vmax + i) : F8(0.f);
      om::adam_update<F8, kDecay, kDecoupled, kAms>(pp, F8::load(g + i), mm, vv, vm, s8);
      pp.store(p + i);
      mm.store(m + i);
      vv.store(v + i);
      if constexpr (kAms) vm.store(vmax + i);
    }
  }
#endif
  for (; i < n; ++i) {
    S pp = static_cast<S>(p[i]), mm = static_cast<S>(m[i]), vv = static_cast<S>(v[i]);
    S vm = kAms ? static_cast<S>(vmax[i]) : S(0);
    om::adam_update<S, kDecay, kDecoupled, kAms>(pp, static_cast<S>(g[i]), mm, vv, vm, s);
    p[i] = om::store_param<T>(pp, s, key, i);
    m[i] = M(mm);
    v[i] = M(vv);
    if constexpr (kAms) vmax[i] = M(vm);
  }
}

template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
void sgd_loop(T* __restrict p, const T* __restrict g, M* __restrict buf, int64_t n, bool first,
              const om::SgdScalars<S>& s) {
  for (int64_t i = 0; i < n; ++i) {
    S pp = static_cast<S>(p[i]);
    S b = kMomentum ? static_cast<S>(buf[i]) : S(0);
    om::sgd_update<S, kDecay, kMomentum, kNesterov>(pp, static_cast<S>(g[i]), b, first, s);
    p[i] = T(pp);
    if constexpr (kMomentum) buf[i] = M(b);
  }
}

struct CpuLauncher {
  template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
  void adam(const std::vector<om::AdamPointers<T, M>>& list, const om::AdamScalars<S>& s,
            const om::AdamScalars<S>* dynamic) const {
    const om::AdamScalars<S>& use = dynamic != nullptr ? *dynamic : s;  // CPU "device" memory is host memory
    for (const auto& a : list)
      adam_loop<T, M, S, kDecay, kDecoupled, kAms>(a.p, a.g, a.m, a.v, a.vmax, a.n, a.key, use);
  }
  template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
  void sgd(const std::vector<om::SgdPointers<T, M>>& list, bool first, const om::SgdScalars<S>& s,
           const om::SgdScalars<S>* dynamic) const {
    const om::SgdScalars<S>& use = dynamic != nullptr ? *dynamic : s;
    for (const auto& a : list) sgd_loop<T, M, S, kDecay, kMomentum, kNesterov>(a.p, a.g, a.buf, a.n, first, use);
  }
};

// RMSprop, Adagrad and Lion: one loop over (param, grad, Op::kStates state tensors) per listed tensor.
template <class T, class M, class Op>
void state_update_loop(const om::StatePointers<T, M>& a, const Op& op) {
  using S = acc_t<T>;
  T* __restrict p = a.p;
  const T* __restrict g = a.g;
  for (int64_t i = 0; i < a.n; ++i) {
    S pp = static_cast<S>(p[i]);
    S st[Op::kStates];
    for (int k = 0; k < Op::kStates; ++k) st[k] = static_cast<S>(a.state[k][i]);
    op(pp, static_cast<S>(g[i]), st);
    p[i] = T(pp);
    for (int k = 0; k < Op::kStates; ++k) a.state[k][i] = M(st[k]);
  }
}

struct CpuStateLauncher {
  template <class T, class M, class Op>
  void run(const std::vector<om::StatePointers<T, M>>& list, const Op& op) const {
    for (const auto& a : list) state_update_loop(a, op);
  }
};

void rmsprop_step(const std::vector<RmspropTensors>& list, const RmspropHyper& h) {
  om::dispatch_rmsprop(CpuStateLauncher{}, list, h);
}
void adagrad_step(const std::vector<AdagradTensors>& list, const AdagradHyper& h) {
  om::dispatch_adagrad(CpuStateLauncher{}, list, h);
}
void lion_step(const std::vector<LionTensors>& list, const LionHyper& h) { om::dispatch_lion(CpuStateLauncher{}, list, h); }

void adam_step(const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic) {
  om::dispatch_adam(CpuLauncher{}, list, h, dynamic);
}

void sgd_step(const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic) {
  om::dispatch_sgd(CpuLauncher{}, list, h, dynamic);
}

void unscale_check(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found) {
  if (grads.empty()) return;
  dispatch_floating(grads.front().dtype(), "unscale_check", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const S inv = static_cast<S>(inv_scale);
    bool bad = false;
    for (const Tensor& grad : grads) {
      T* g = static_cast<T*>(grad.data_ptr());
      const int64_t n = grad.numel();
      for (int64_t i = 0; i < n; ++i) {
        S v = static_cast<S>(g[i]);
        bad |= om::unscale_update(v, inv);
        g[i] = T(v);
      }
    }
    if (bad) *static_cast<float*>(found.data_ptr()) = 1.0f;
  });
}

// In index order, tensor after tensor: the sum is the same on every run and for every list split.
void norm_partial(const std::vector<Tensor>& list, double p, const Tensor& out) {
  if (list.empty()) return;
  const om::NormKind kind = om::norm_kind(p);
  double acc = *static_cast<double*>(out.data_ptr());
  dispatch_floating(list.front().dtype(), "norm_partial", [&](auto tag) {
    using T = decltype(tag);
    for (const Tensor& t : list) {
      const T* d = static_cast<const T*>(t.data_ptr());
      const int64_t n = t.numel();
      double part = 0.0;
      for (int64_t i = 0; i < n; ++i) part = om::norm_combine(part, om::norm_term(static_cast<double>(d[i]), kind, p), kind);
      acc = om::norm_combine(acc, part, kind);
    }
  });
  *static_cast<double*>(out.data_ptr()) = acc;
}

void scale_by(const std::vector<Tensor>& list, const Tensor& coef) {
  if (list.empty()) return;
  const bool f32 = coef.dtype() == DType::f32;  // used as it is; an f64 coef is rounded to T first
  const double c64 = f32 ? 0.0 : *static_cast<const double*>(coef.data_ptr());
  const float c32 = f32 ? *static_cast<const float*>(coef.data_ptr()) : 0.0f;
  dispatch_floating(list.front().dtype(), "scale_by", [&](auto tag) {
    using T = decltype(tag);
    using S = acc_t<T>;
    const S c = f32 ? static_cast<S>(c32) : static_cast<S>(from_f64<T>(c64));
    if (c == S(1)) return;  // x * 1 == x: nothing to write (as the CUDA kernel)
    for (const Tensor& t : list) {
      T* d = static_cast<T*>(t.data_ptr());
      const int64_t n = t.numel();
      for (int64_t i = 0; i < n; ++i) d[i] = T(static_cast<S>(d[i]) * c);
    }
  });
}

}  // namespace

constexpr backend::OptimKernels optim_kernels{
    .adam_step = {adam_step, backend::kFloating},
    .sgd_step = {sgd_step, backend::kFloating},
    .rmsprop_step = {rmsprop_step, backend::kFloating},
    .adagrad_step = {adagrad_step, backend::kFloating},
    .lion_step = {lion_step, backend::kFloating},
    .unscale_check = {unscale_check, backend::kFloating},
    .norm_partial = {norm_partial, backend::kFloating},
    .scale_by = {scale_by, backend::kFloating},
};

}  // namespace volt::cpu
