// CUDA elementwise kernels: the functors and the dtype dispatch are kernels/common/elementwise_impl.h, the strided
// launches kernels/cuda/loops.cuh.
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/elementwise_impl.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {
struct Gpu {
  template <class O, class I, class F> static void map1(const Tensor& o, const Tensor& i, F f) { cuda::map1<O, I>(o, i, f); }
  template <class O, class A, class B, class F>
  static void map2(const Tensor& o, const Tensor& a, const Tensor& b, F f) { cuda::map2<O, A, B>(o, a, b, f); }
  template <class O, class A, class B, class C, class F>
  static void map3(const Tensor& o, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
    cuda::map3<O, A, B, C>(o, a, b, c, f);
  }
};

void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p) { elementwise_impl::unary<Gpu>(op, out, in, p); }
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p) {
  elementwise_impl::binary<Gpu>(op, out, a, b, p);
}
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) { elementwise_impl::compare<Gpu>(op, out, a, b); }
void where(const Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b) { elementwise_impl::where<Gpu>(out, c, a, b); }
void cast(const Tensor& out, const Tensor& in) { elementwise_impl::cast<Gpu>(out, in); }

}  // namespace

constexpr backend::ElementwiseKernels elementwise_kernels{
    .unary = {unary, backend::kAllDTypes},
    .binary = {binary, backend::kNumeric},
    .compare = {compare, backend::kAllDTypes},
    .where = {where, backend::kAllDTypes},
    .cast = {cast, backend::kAllDTypes},
};

}  // namespace volt::cuda
