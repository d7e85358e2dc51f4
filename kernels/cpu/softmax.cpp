// CPU softmax / log_softmax over the middle dim of (outer, r, inner); the math is kernels/common/softmax.h.
#include <cmath>
#include <limits>
#include <vector>

#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>

namespace volt::cpu {

namespace {

void softmax_fwd(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_floating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    if (inner == 1) {
      for (int64_t o = 0; o < outer; ++o) {
        const T* xr = x + o * r;
        T* yr = y + o * r;
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t k = 0; k < r; ++k) m = A(xr[k]) > m ? A(xr[k]) : m;
        if (!std::isfinite(static_cast<double>(m))) m = A(0);  // all -inf (or +inf/NaN): let the math produce NaN/-inf
        A s = 0;
        for (int64_t k = 0; k < r; ++k) s += em::exp_(A(xr[k]) - m);
        if (log) {
          A lse = m + em::log_(s);
          for (int64_t k = 0; k < r; ++k) yr[k] = T(A(xr[k]) - lse);
        } else {
          A inv = A(1) / s;
          for (int64_t k = 0; k < r; ++k) yr[k] = T(em::exp_(A(xr[k]) - m) * inv);
        }
      }
      return;
    }
    // Strided: per outer slice, keep (max, sum) vectors over inner so the inner loops are unit-stride.
    std::vector<A> m(static_cast<size_t>(inner)), s(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* xb = x + o * r * inner;
      T* yb = y + o * r * inner;
      for (int64_t i = 0; i < inner; ++i) { m[i] = -std::numeric_limits<A>::infinity(); s[i] = 0; }
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) m[i] = A(xb[k * inner + i]) > m[i] ? A(xb[k * inner + i]) : m[i];
      for (int64_t i = 0; i < inner; ++i)
        if (!std::isfinite(static_cast<double>(m[i]))) m[i] = A(0);
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) s[i] += em::exp_(A(xb[k * inner + i]) - m[i]);
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          A v = A(xb[k * inner + i]) - m[i];
          yb[k * inner + i] = log ? T(v - em::log_(s[i])) : T(em::exp_(v) / s[i]);
        }
    }
  });
}

}  // namespace

constexpr backend::SoftmaxKernels softmax_kernels{.softmax_fwd = {softmax_fwd, backend::kFloating}};

}  // namespace volt::cpu
