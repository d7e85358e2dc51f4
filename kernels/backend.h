#pragma once
// The kernels each backend provides. kernels/cpu implements every function in volt::cpu; kernels/cuda the same
// names in volt::cuda (compiled only with the CUDA backend). Public ops in kernels/ops pick one with
// VOLT_DISPATCH_DEVICE, after checking arguments; backends may assume valid, same-device inputs.
#include <cstdint>
#include <optional>

#include <volt/kernels/common/elementwise.h>
#include <volt/runtime/cuda_api.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/trace.h>
#include <volt/config.h>

namespace volt {

namespace detail {
[[noreturn]] void no_cuda_backend(const char* fn);
}

#define VOLT_BACKEND_DECLS                                                                          \
  void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p);                 \
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p); \
  void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);                  \
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);              \
  void cast(const Tensor& out, const Tensor& in);                                                   \
  void uniform(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi);            \
  void normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std);         \
  void arange(const Tensor& out, double start, double step);                                        \
  /* in: contiguous (M, R) -> out: contiguous (M), sums in the accumulation type (double for f32) */  \
  void sum_rows(const Tensor& out, const Tensor& in);                                               \
  /* in: contiguous (R, M) -> out: contiguous (M) */                                                 \
  void sum_cols(const Tensor& out, const Tensor& in);

namespace cpu { VOLT_BACKEND_DECLS }
namespace cuda { VOLT_BACKEND_DECLS }
#undef VOLT_BACKEND_DECLS

}  // namespace volt

#if VOLT_WITH_CUDA
// Kernel launches must target streams of the current device: make the tensor's GPU current for the call.
#define VOLT_CUDA_CALL_(device, fn, ...)              \
  ::volt::DeviceScope volt_device_scope_(device);     \
  return ::volt::cuda::fn(__VA_ARGS__)
#else
#define VOLT_CUDA_CALL_(device, fn, ...) ::volt::detail::no_cuda_backend(#fn)
#endif

// Calls volt::cuda::fn(args) for a CUDA device (made current for the call), else volt::cpu::fn(args). Each
// call is a kernel-layer trace range named after fn (runtime/trace.h: NVTX domain "volt.kernels"; the op
// profiler times it, with CUDA events on a GPU).
#define VOLT_DISPATCH_DEVICE(device, fn, ...)                     \
  ([&]() -> decltype(auto) {                                      \
    ::volt::trace::Range volt_kernel_range_(::volt::trace::Layer::kernel, #fn, ::volt::trace::RangeInfo{(device)}); \
    if ((device).is_cuda()) { VOLT_CUDA_CALL_(device, fn, __VA_ARGS__); } \
    return ::volt::cpu::fn(__VA_ARGS__);                          \
  }())
