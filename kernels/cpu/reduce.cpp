// CPU reductions: row and column sums, arg-reductions over the middle dim of (outer, r, inner).
#include <vector>

#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>

namespace volt::cpu {

namespace {
template <class T> struct sum_acc { using type = acc_t<T>; };
template <> struct sum_acc<float> { using type = double; };

void sum_rows(const Tensor& out, const Tensor& in) {
  const int64_t M = in.shape()[0], R = in.shape()[1];
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = typename sum_acc<T>::type;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t m = 0; m < M; ++m) {
      A acc = A(0);
      const T* row = x + m * R;
      for (int64_t r = 0; r < R; ++r) acc += A(row[r]);
      o[m] = T(acc);
    }
  });
}

void sum_cols(const Tensor& out, const Tensor& in) {
  const int64_t R = in.shape()[0], M = in.shape()[1];
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;  // column sums vectorise across m; float accumulation per column
    const T* x = static_cast<const T*>(in.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    std::vector<A> acc(static_cast<size_t>(M), A(0));
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * M;
      for (int64_t m = 0; m < M; ++m) acc[m] += A(row[m]);
    }
    for (int64_t m = 0; m < M; ++m) o[m] = T(acc[m]);
  });
}

void arg_reduce(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t r,
                int64_t inner, bool is_max) {
  dispatch_numeric(in.dtype(), is_max ? "max" : "min", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* v = values.defined() ? static_cast<T*>(values.data_ptr()) : nullptr;
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    if (inner == 1) {  // rows are contiguous: the common argmax(1) / max over the last dim case
      for (int64_t o = 0; o < outer; ++o) {
        const T* row = x + o * r;
        A best = A(row[0]);
        int64_t bi = 0;
        for (int64_t k = 1; k < r; ++k) {
          A xv = A(row[k]);
          if (nnmath::arg_better(xv, best, is_max)) { best = xv; bi = k; }
        }
        idx[o] = bi;
        if (v) v[o] = row[bi];
      }
      return;
    }
    // Strided over inner: sweep the reduced dim row by row so the inner loop stays unit-stride.
    std::vector<A> best(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* base = x + o * r * inner;
      int64_t* io = idx + o * inner;
      for (int64_t i = 0; i < inner; ++i) { best[i] = A(base[i]); io[i] = 0; }
      for (int64_t k = 1; k < r; ++k) {
        const T* row = base + k * inner;
        for (int64_t i = 0; i < inner; ++i) {
          A xv = A(row[i]);
          if (nnmath::arg_better(xv, best[i], is_max)) { best[i] = xv; io[i] = k; }
        }
      }
      if (v)
        for (int64_t i = 0; i < inner; ++i) v[o * inner + i] = base[io[i] * inner + i];
    }
  });
}

}  // namespace

constexpr backend::ReduceKernels reduce_kernels{
    .sum_rows = {sum_rows, backend::kNumeric},
    .sum_cols = {sum_cols, backend::kNumeric},
    .arg_reduce = {arg_reduce, backend::kNumeric},
};

}  // namespace volt::cpu
