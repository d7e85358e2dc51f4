#include <volt/kernels/backend.h>
#include <volt/kernels/common/elementwise_impl.h>
#include <volt/kernels/common/philox.h>
#include <volt/kernels/cpu/loops.h>

namespace volt::cpu {

namespace {
struct Cpu {
  template <class O, class I, class F> static void map1(const Tensor& o, const Tensor& i, F f) { cpu::map1<O, I>(o, i, f); }
  template <class O, class A, class B, class F>
  static void map2(const Tensor& o, const Tensor& a, const Tensor& b, F f) { cpu::map2<O, A, B>(o, a, b, f); }
  template <class O, class A, class B, class C, class F>
  static void map3(const Tensor& o, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
    cpu::map3<O, A, B, C>(o, a, b, c, f);
  }
};
}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p) { elementwise_impl::unary<Cpu>(op, out, in, p); }
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p) {
  elementwise_impl::binary<Cpu>(op, out, a, b, p);
}
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) { elementwise_impl::compare<Cpu>(op, out, a, b); }
void where(const Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b) { elementwise_impl::where<Cpu>(out, c, a, b); }
void cast(const Tensor& out, const Tensor& in) { elementwise_impl::cast<Cpu>(out, in); }

// Random fills write contiguous `out`; element i depends only on (seed, offset, i).
void uniform(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi) {
  const int64_t n = out.numel();
  dispatch_floating(out.dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(philox::mad(A(hi - lo), A(philox::uniform_at(seed, offset, static_cast<uint64_t>(i))), A(lo)));
  });
}

void normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std) {
  const int64_t n = out.numel();
  dispatch_floating(out.dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(philox::mad(A(std), A(philox::normal_at(seed, offset, static_cast<uint64_t>(i))), A(mean)));
  });
}

void arange(const Tensor& out, double start, double step) {
  const int64_t n = out.numel();
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) o[i] = T(static_cast<acc_t<T>>(start + step * static_cast<double>(i)));
  });
}

}  // namespace volt::cpu
