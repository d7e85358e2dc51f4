// CUDA fills of the factory ops: Philox random numbers (runtime/philox.h and kernels/common/philox_int.h,
// bit-identical to the CPU), arange and linspace, one grid-stride pass each.
#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/philox_int.h>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/runtime/philox.h>

namespace volt::cuda {

namespace {

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, PhiloxArgs rng, double lo, double hi) {
  const uint64_t seed = rng.key(), offset = rng.first();
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(philox::mad(A(hi - lo), A(philox::uniform_at(seed, offset, static_cast<uint64_t>(i))), A(lo)));
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, PhiloxArgs rng, double mean, double std) {
  const uint64_t seed = rng.key(), offset = rng.first();
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(philox::mad(A(std), A(philox::normal_at(seed, offset, static_cast<uint64_t>(i))), A(mean)));
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(static_cast<acc_t<T>>(start + step * static_cast<double>(i)));
}

template <class T>
__global__ void linspace_kernel(T* out, int64_t n, double start, double end) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(static_cast<acc_t<T>>(n == 1 ? start : linspace_at(start, end, n, i)));
}

template <class T>
__global__ void randint_kernel(T* out, int64_t n, PhiloxArgs rng, int64_t low, uint64_t range) {
  const uint64_t seed = rng.key(), offset = rng.first();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(static_cast<acc_t<T>>(philox::randint_at(seed, offset, static_cast<uint64_t>(i), low, range)));
}

void uniform(const Tensor& out, PhiloxArgs rng, double lo, double hi) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    uniform_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()), n, rng, lo,
                                                                       hi);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void normal(const Tensor& out, PhiloxArgs rng, double mean, double std) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()), n, rng, mean,
                                                                      std);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void arange(const Tensor& out, double start, double step) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()), n, start, step);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void linspace(const Tensor& out, double start, double end) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype(), "linspace", [&](auto tag) {
    using T = decltype(tag);
    linspace_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()), n, start,
                                                                        end);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void randint(const Tensor& out, PhiloxArgs rng, int64_t low, uint64_t range) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype(), "randint", [&](auto tag) {
    using T = decltype(tag);
    randint_kernel<T><<<blocks_for(n), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()), n, rng, low,
                                                                       range);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::FactoryKernels factory_kernels{
    .uniform = {uniform, backend::kFloating},
    .normal = {normal, backend::kFloating},
    .arange = {arange, backend::kNumeric},
    .linspace = {linspace, backend::kNumeric},
    .randint = {randint, backend::kNumeric},
};

}  // namespace volt::cuda
