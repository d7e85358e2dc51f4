// CPU batch norm, f32 and f64. x is (N, C, S) contiguous with S = H*W (1 for 2-D input). Statistics in two
// passes (no cancellation for large means): the sum, then the sum of squared deviations from the mean. Each
// (n, c) plane of S contiguous values is summed in kLanes partial sums of x's dtype (vectorised), flushed into a
// double every kBlock values, so that f32 sums of any length keep double-like accuracy.
#include <algorithm>
#include <cmath>
#include <type_traits>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

constexpr int64_t kLanes = 16, kBlock = 512;  // kBlock: a multiple of kLanes

// Adds sum f(i) to s1 and sum h(i) to s2 over i in [0, n), the terms computed in T: the portable loop.
template <class T, class F, class H>
inline void sum2_loop(int64_t n, F f, H h, double& s1, double& s2) {
  int64_t i = 0;
  while (n - i >= kLanes) {
    const int64_t end = i + std::min<int64_t>(kBlock, (n - i) / kLanes * kLanes);
    T a[kLanes] = {}, b[kLanes] = {};
    for (; i < end; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) {
        a[j] += f(i + j);
        b[j] += h(i + j);
      }
    double ta = 0, tb = 0;
    for (int64_t j = 0; j < kLanes; ++j) {
      ta += a[j];
      tb += b[j];
    }
    s1 += ta;
    s2 += tb;
  }
  for (; i < n; ++i) {
    s1 += f(i);
    s2 += h(i);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
inline double hsum(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  double s = 0;
  for (float x : t) s += x;
  return s;
}

// The f32 sums with AVX2 over the first n / 16 * 16 values (returned; the caller sums the tail): two
// accumulators per sum, flushed to double every kBlock values. op(x, g, a, b) adds 8 lanes' terms to a and b;
// g may be null when unused (op then gets x for it).
template <class Op>
inline int64_t sum2_f32(const float* x, const float* g, int64_t n, Op op, double& s1, double& s2) {
  int64_t i = 0;
  while (n - i >= 16) {
    const int64_t end = i + std::min<int64_t>(kBlock, (n - i) / 16 * 16);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    for (; i < end; i += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
      const __m256 g0 = g ? _mm256_loadu_ps(g + i) : x0, g1 = g ? _mm256_loadu_ps(g + i + 8) : x1;
      op(x0, g0, a0, b0);
      op(x1, g1, a1, b1);
    }
    s1 += hsum(_mm256_add_ps(a0, a1));
    s2 += hsum(_mm256_add_ps(b0, b1));
  }
  return i;
}
#endif

// sum(x) over a run of n values.
template <class T>
inline double run_sum(const T* x, int64_t n) {
  double s = 0, unused = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    x += sum2_f32(x, nullptr, n, [](__m256 v, __m256, __m256& a, __m256&) { a = _mm256_add_ps(a, v); }, s, unused);
    n %= 16;
  }
#endif
  sum2_loop<T>(n, [x](int64_t i) { return x[i]; }, [](int64_t) { return T(0); }, s, unused);
  return s;
}

// sum((x - m)^2) over a run of n values.
template <class T>
inline double run_sum_sq_dev(const T* x, T m, int64_t n) {
  double s = 0, unused = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 mv = _mm256_set1_ps(m);
    x += sum2_f32(x, nullptr, n, [mv](__m256 v, __m256, __m256& a, __m256&) {
      const __m256 d = _mm256_sub_ps(v, mv);
      a = _mm256_fmadd_ps(d, d, a);
    }, s, unused);
    n %= 16;
  }
#endif
  sum2_loop<T>(n, [x, m](int64_t i) { const T d = x[i] - m; return d * d; }, [](int64_t) { return T(0); }, s, unused);
  return s;
}

// sg += sum(g), sgd += sum(g * (x - m)) over a run of n values.
template <class T>
inline void run_sum_g_gd(const T* x, const T* g, T m, int64_t n, double& sg, double& sgd) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 mv = _mm256_set1_ps(m);
    const int64_t done = sum2_f32(x, g, n, [mv](__m256 v, __m256 gv, __m256& a, __m256& b) {
      a = _mm256_add_ps(a, gv);
      b = _mm256_fmadd_ps(gv, _mm256_sub_ps(v, mv), b);
    }, sg, sgd);
    x += done;
    g += done;
    n -= done;
  }
#endif
  sum2_loop<T>(n, [g](int64_t i) { return g[i]; }, [g, x, m](int64_t i) { return g[i] * (x[i] - m); }, sg, sgd);
}

void batch_norm_forward_train(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                              const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, double momentum, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const double count = static_cast<double>(N * S);
  dispatch_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    const T* b = static_cast<const T*>(bias.data_ptr());
    T* sm = static_cast<T*>(save_mean.data_ptr());
    T* si = static_cast<T*>(save_invstd.data_ptr());
    T* rm = running_mean.defined() ? static_cast<T*>(running_mean.data_ptr()) : nullptr;
    T* rv = running_var.defined() ? static_cast<T*>(running_var.data_ptr()) : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        s += run_sum(xr, S);
      }
      const double mean = s / count;
      double ss = 0;  // two passes: no cancellation for large means
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        const T m = static_cast<T>(mean);
        ss += run_sum_sq_dev(xr, m, S);
      }
      const double var = ss / count, invstd = 1.0 / std::sqrt(var + eps);
      sm[c] = static_cast<T>(mean);
      si[c] = static_cast<T>(invstd);
      // out = (x - mean) * (w * invstd) + b
      const T m = static_cast<T>(mean), scale = static_cast<T>(w[c] * invstd), shift = b[c];
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        T* orow = op + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) orow[i] = (xr[i] - m) * scale + shift;
      }
      if (rm) rm[c] = static_cast<T>((1 - momentum) * rm[c] + momentum * mean);
      if (rv) {
        const double unbiased = count > 1 ? ss / (count - 1) : var;
        rv[c] = static_cast<T>((1 - momentum) * rv[c] + momentum * unbiased);
      }
    }
  });
}

void batch_norm_forward_eval(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  dispatch_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const T *w = static_cast<const T*>(weight.data_ptr()), *b = static_cast<const T*>(bias.data_ptr());
    const T *rm = static_cast<const T*>(running_mean.data_ptr()), *rv = static_cast<const T*>(running_var.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      const T scale = static_cast<T>(w[c] / std::sqrt(static_cast<double>(rv[c]) + eps)), m = rm[c], shift = b[c];
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        T* orow = op + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) orow[i] = (xr[i] - m) * scale + shift;
      }
    }
  });
}

void batch_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const double count = static_cast<double>(N * S);
  dispatch_f32_f64(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    const T *sm = static_cast<const T*>(save_mean.data_ptr()), *si = static_cast<const T*>(save_invstd.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      const double invstd = si[c];
      const T m = sm[c];
      double sg = 0, sgd = 0;  // sum(g), sum(g * (x - mean))
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        const T* gr = gp + (n * C + c) * S;
        run_sum_g_gd(xr, gr, m, S, sg, sgd);
      }
      const double sgx = sgd * invstd;  // sum(g * xhat)
      if (grad_weight.defined()) static_cast<T*>(grad_weight.data_ptr())[c] = static_cast<T>(sgx);
      if (grad_bias.defined()) static_cast<T*>(grad_bias.data_ptr())[c] = static_cast<T>(sg);
      if (!grad_x.defined()) continue;
      // dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)) = k * g + (x - mean) * kx + k0
      T* gx = static_cast<T*>(grad_x.data_ptr());
      const double k = w[c] * invstd, mg = sg / count, mgx = sgx / count;
      const T tk = static_cast<T>(k), tkx = static_cast<T>(-k * invstd * mgx), tk0 = static_cast<T>(-k * mg);
      for (int64_t n = 0; n < N; ++n) {
        const T* xr = xp + (n * C + c) * S;
        const T* gr = gp + (n * C + c) * S;
        T* gxr = gx + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) gxr[i] = tk * gr[i] + (xr[i] - m) * tkx + tk0;
      }
    }
  });
}

}  // namespace

constexpr backend::BatchNormKernels batch_norm_kernels{
    .batch_norm_forward_train = {batch_norm_forward_train, backend::kF32F64},
    .batch_norm_forward_eval = {batch_norm_forward_eval, backend::kF32F64},
    .batch_norm_backward = {batch_norm_backward, backend::kF32F64},
};

}  // namespace volt::cpu
