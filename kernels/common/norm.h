#pragma once
// Per-row math of layer_norm and group_norm, shared by the CPU loops (kernels/cpu/norm.cpp) and the CUDA
// kernels (kernels/cuda/norm.cu). Both ops normalise independent "rows" (a row is one sample's trailing dims for
// layer_norm, one (sample, group) pair for group_norm) and then apply a per-parameter affine transform; they
// differ only in which affine parameter an element uses, which NormGeom describes.
//
// Statistics, weight, bias and their gradients are in the accumulation type A: float for f32/f16/bf16 inputs,
// double for f64.
#include <cstdint>

#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/common/macros.h>

// Full unrolling of welford_of's loops in device code, so that a register array read through `get` is indexed by
// constants (a loop left rolled would move the array to local memory).
#if defined(__CUDA_ARCH__)
#define VOLT_NORM_UNROLL _Pragma("unroll")
#else
#define VOLT_NORM_UNROLL
#endif

namespace volt {

// A normalisation laid out as `rows` contiguous rows of `row_size` elements. Row r holds channels
// [(r % groups) * cpg, (r % groups + 1) * cpg) with cpg = row_size / inner, each over `inner` consecutive
// elements, so element j of row r uses affine parameter (r % groups) * cpg + j / inner.
//   layer_norm: rows = prod(leading dims), row_size = prod(normalized_shape), groups = 1, inner = 1
//   group_norm: rows = N * G, row_size = (C / G) * S, groups = G, inner = S (spatial size)
struct NormGeom {
  int64_t rows = 0;
  int64_t row_size = 0;
  int64_t groups = 1;
  int64_t inner = 1;
  VOLT_HD int64_t channels_per_group() const { return row_size / inner; }
  VOLT_HD int64_t num_params() const { return groups * channels_per_group(); }
  // Element j of row r uses this affine parameter.
  VOLT_HD int64_t param_index(int64_t r, int64_t j) const { return (r % groups) * channels_per_group() + j / inner; }
};

namespace normmath {

// Welford's running mean and sum of squared deviations; partial states merge exactly (Chan et al.), so a CUDA
// block can combine per-thread states. Plain fields (no initialisers) so arrays of it may live in shared memory.
template <class A>
struct Welford {
  A mean, m2, n;
};
template <class A>
VOLT_HD Welford<A> welford_init() {
  Welford<A> w;
  w.mean = A(0);
  w.m2 = A(0);
  w.n = A(0);
  return w;
}
template <class A>
VOLT_HD void welford_push(Welford<A>& w, A x) {
  w.n += A(1);
  const A d = x - w.mean;
  w.mean += d / w.n;
  w.m2 += d * (x - w.mean);
}
template <class A>
VOLT_HD void welford_merge(Welford<A>& a, const Welford<A>& b) {
  if (b.n == A(0)) return;
  if (a.n == A(0)) {
    a = b;
    return;
  }
  const A n = a.n + b.n, d = b.mean - a.mean, fb = b.n / n;
  a.mean += d * fb;
  a.m2 += b.m2 + d * d * a.n * fb;
  a.n = n;
}
// The Welford state of the values get(0), ..., get(count - 1) with count <= N, for a share of a row a CUDA lane
// holds in registers: their mean, then the sum of squared deviations from it (two passes and one division, where
// welford_push divides per value). It merges with welford_merge like a pushed state. N is a compile-time bound so
// that the loops unroll and get's register array is indexed by constants.
template <int N, class A, class Get>
VOLT_HD Welford<A> welford_of(int count, Get get) {
  Welford<A> w = welford_init<A>();
  if (count <= 0) return w;
  A sum = A(0);
  VOLT_NORM_UNROLL
  for (int i = 0; i < N; ++i)
    if (i < count) sum += get(i);
  w.n = A(count);
  w.mean = sum / w.n;
  VOLT_NORM_UNROLL
  for (int i = 0; i < N; ++i)
    if (i < count) {
      const A d = get(i) - w.mean;
      w.m2 += d * d;
    }
  return w;
}

// 1 / sqrt(biased variance + eps); an empty row gives 1 / sqrt(eps).
template <class A>
VOLT_HD A welford_rstd(const Welford<A>& w, A eps) {
  A var = w.n > A(0) ? w.m2 / w.n : A(0);
  if (var < A(0)) var = A(0);
  return A(1) / em::sqrt_(var + eps);
}

// y = (x - mean) * rstd * w + b
template <class A>
VOLT_HD A norm_forward(A x, A mean, A rstd, A w, A b) { return (x - mean) * rstd * w + b; }

template <class A>
VOLT_HD A norm_xhat(A x, A mean, A rstd) { return (x - mean) * rstd; }

// dx of one element of a row of n elements, with gw = dy * w for the element and, over the row,
// mean_gw = sum(gw) / n and mean_gwx = sum(gw * xhat) / n:
//   dx = rstd * (gw - mean_gw - xhat * mean_gwx)
template <class A>
VOLT_HD A norm_backward_dx(A gw, A xhat, A rstd, A mean_gw, A mean_gwx) {
  return rstd * (gw - mean_gw - xhat * mean_gwx);
}

}  // namespace normmath
}  // namespace volt
