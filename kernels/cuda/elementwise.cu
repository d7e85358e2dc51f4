#include <volt/kernels/backend.h>
#include <volt/kernels/common/elementwise_impl.h>
#include <volt/kernels/common/philox.h>
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

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(philox::mad(A(hi - lo), A(philox::uniform_at(seed, offset, static_cast<uint64_t>(i))), A(lo)));
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(philox::mad(A(std), A(philox::normal_at(seed, offset, static_cast<uint64_t>(i))), A(mean)));
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(static_cast<acc_t<T>>(start + step * static_cast<double>(i)));
}
}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p) { elementwise_impl::unary<Gpu>(op, out, in, p); }
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p) {
  elementwise_impl::binary<Gpu>(op, out, a, b, p);
}
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) { elementwise_impl::compare<Gpu>(op, out, a, b); }
void where(const Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b) { elementwise_impl::where<Gpu>(out, c, a, b); }
void cast(const Tensor& out, const Tensor& in) { elementwise_impl::cast<Gpu>(out, in); }

void uniform(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    uniform_kernel<T><<<blocks_for(n), 256, 0, compute_stream(out)>>>(static_cast<T*>(out.data_ptr()), n, seed,
                                                                       offset, lo, hi);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<blocks_for(n), 256, 0, compute_stream(out)>>>(static_cast<T*>(out.data_ptr()), n, seed,
                                                                      offset, mean, std);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void arange(const Tensor& out, double start, double step) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(n), 256, 0, compute_stream(out)>>>(static_cast<T*>(out.data_ptr()), n, start, step);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
