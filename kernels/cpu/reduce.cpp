#include "kernels/backend.h"
#include "kernels/common/dispatch.h"

namespace volt::cpu {

namespace {
template <class T> struct sum_acc { using type = acc_t<T>; };
template <> struct sum_acc<float> { using type = double; };
}  // namespace

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

}  // namespace volt::cpu
