#pragma once
// Per-line scan math shared by the CPU loops (kernels/cpu/scan_sort.cpp) and the CUDA kernels
// (kernels/cuda/scan_sort.cu, one thread per line): a line is D elements `inner` apart. Sums and products
// accumulate in acc_t<T> (f32 for f16/bf16, so a long half scan is rounded once per output, not per step).
#include <cstdint>

#include <volt/kernels/common/half.h>
#include <volt/kernels/common/macros.h>

namespace volt {

// out[j] = in[0] + ... + in[j] (reverse: in[j] + ... + in[D-1]).
template <class T>
VOLT_HD void cumsum_line(T* out, const T* in, int64_t D, int64_t inner, bool reverse) {
  acc_t<T> s = acc_t<T>(0);
  for (int64_t t = 0; t < D; ++t) {
    const int64_t j = reverse ? D - 1 - t : t;
    s += static_cast<acc_t<T>>(in[j * inner]);
    out[j * inner] = static_cast<T>(s);
  }
}

// out[j] = in[0] * ... * in[j].
template <class T>
VOLT_HD void cumprod_line(T* out, const T* in, int64_t D, int64_t inner) {
  acc_t<T> p = acc_t<T>(1);
  for (int64_t j = 0; j < D; ++j) {
    p *= static_cast<acc_t<T>>(in[j * inner]);
    out[j * inner] = static_cast<T>(p);
  }
}

// The gradient of cumprod for one line (T = float or double), exact where x has zeros:
//   g_in[i] = sum_{j >= i} g_out[j] * prod_{k <= j, k != i} x[k].
// Before the first zero z this is (sum_{j >= i} g_out[j] * out[j]) / x[i]; at z it is
// prod_{k < z} x[k] * sum_{j >= z} g_out[j] * prod_{z < k <= j} x[k]; after z every term holds x[z] = 0.
// g_in doubles as scratch for g_out[j] * out[j]. Three passes, O(D).
template <class T>
VOLT_HD void cumprod_backward_line(T* g_in, const T* g_out, const T* x, int64_t D, int64_t inner) {
  int64_t z = D;
  T p = T(1);
  for (int64_t j = 0; j < D; ++j) {
    const T xj = x[j * inner];
    if (z == D && xj == T(0)) z = j;
    p *= xj;
    g_in[j * inner] = g_out[j * inner] * p;  // scratch: g_out[j] * out[j]
  }
  T s = T(0);
  for (int64_t j = D - 1; j >= 0; --j) {
    s += g_in[j * inner];
    g_in[j * inner] = j < z ? s / x[j * inner] : T(0);
  }
  if (z < D) {
    T before = T(1);
    for (int64_t k = 0; k < z; ++k) before *= x[k * inner];
    T q = T(1), acc = T(0);
    for (int64_t j = z; j < D; ++j) {
      if (j > z) q *= x[j * inner];
      acc += g_out[j * inner] * q;
    }
    g_in[z * inner] = before * acc;
  }
}

}  // namespace volt
