#pragma once
// The backend interface. Each op family has one header here declaring its kernels once, as a struct of
// Kernel<> members (elementwise.h, factory.h, reduce.h, softmax.h, loss.h, dropout.h, index.h, attention.h,
// norm.h, batch_norm.h, optim.h, linalg.h, conv.h, pool.h, tensor_ops.h); kernels/cpu defines one constant table
// per family (volt::cpu::*_kernels) and kernels/cuda the same in volt::cuda when Volt is built with CUDA. registry.cpp
// gathers them into one Backend per device type: plain constants referenced from a function, no registration by
// static initialisers (which the linker drops from static libraries).
//
// Ops call a kernel, after checking their arguments, with
//   backend::call<&SoftmaxKernels::softmax_fwd>(device, dtype, out, in, outer, r, inner, log);
// which opens a kernel-layer trace range named after the kernel (runtime/trace.h), makes a CUDA device current
// for the call, resolves the call's execution context (device and stream, execution_context.h: the compute
// stream, or a StreamScope's) once for the kernel's launchers, and throws volt::Error naming the kernel, the
// device and the dtype when the device's backend has no such kernel or not for that dtype.
// backend::supported<K>(device, dtype) asks first (an op falls back, e.g. computes in f32); the public
// kernel_supported() (kernels/kernel_support.h) answers the same by name.
#include <tuple>
#include <utility>

#include <volt/config.h>
#include <volt/kernels/backend/execution_context.h>
#include <volt/kernels/backend/kernel.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/device.h>
#include <volt/runtime/trace.h>

namespace volt::backend {

struct ElementwiseKernels;
struct FactoryKernels;
struct ReduceKernels;
struct SoftmaxKernels;
struct LossKernels;
struct DropoutKernels;
struct IndexKernels;
struct AttentionKernels;
struct NormKernels;
struct BatchNormKernels;
struct OptimKernels;
struct LinalgKernels;
struct ConvKernels;
struct PoolKernels;
struct TensorOpKernels;

// Every family, in one place: a Backend holds one table of each.
using FamilyTables =
    std::tuple<const ElementwiseKernels*, const FactoryKernels*, const ReduceKernels*, const SoftmaxKernels*,
               const LossKernels*, const DropoutKernels*, const IndexKernels*, const AttentionKernels*,
               const NormKernels*, const BatchNormKernels*, const OptimKernels*, const LinalgKernels*,
               const ConvKernels*, const PoolKernels*, const TensorOpKernels*>;

struct Backend {
  const char* name;  // "cpu", "cuda": the device type's name in errors
  FamilyTables tables;
};

// The backend of a device type: the CPU's always, CUDA's in a CUDA-enabled build, else nullptr.
const Backend* table(DeviceType type);

template <class F>
const F& family(const Backend& b) {
  return *std::get<const F*>(b.tables);
}

// Test seam: while alive, table(type) returns `replacement` (e.g. the CPU backend with one kernel removed, to
// check the error an op gives for a missing kernel). One at a time per device type; not for concurrent use with
// ops running on other threads.
class ScopedBackendOverride {
 public:
  ScopedBackendOverride(DeviceType type, const Backend* replacement);
  ~ScopedBackendOverride();
  ScopedBackendOverride(const ScopedBackendOverride&) = delete;
  ScopedBackendOverride& operator=(const ScopedBackendOverride&) = delete;

 private:
  DeviceType type_;
  const Backend* previous_;
};

namespace detail {
// The error of a kernel that `b` (nullptr: no backend for the device type) lacks, or lacks for dtype.
[[noreturn]] void missing_kernel(const char* kernel, const char* family, Device device, DType dtype, const Backend* b,
                                 bool has_fn, DTypeSet dtypes);
}  // namespace detail

template <auto K>
using family_of = typename member_class<decltype(K)>::type;

// Whether the backend of `device`'s type has kernel K for `dtype` (not whether that device exists: an op on a
// tensor of a device has one).
template <auto K>
bool supported(Device device, DType dtype) {
  const Backend* b = table(device.type);
  if (b == nullptr) return false;
  const auto& k = family<family_of<K>>(*b).*K;
  return k.fn != nullptr && k.dtypes.contains(dtype);
}

// Whether an op should run a half dtype (f16/bf16) through f32 because the backend has no half kernel K (the
// CPU's GEMM, convolution, pooling and batch norm): the caller's fallback, decided by the tables.
template <auto K>
bool half_through_f32(Device device, DType dtype) {
  return (dtype == DType::f16 || dtype == DType::bf16) && !supported<K>(device, dtype);
}

// Runs kernel K of `device`'s backend, the device made current for a CUDA call, inside a kernel-layer trace range
// named after K, with the call's ExecutionContext published to its launchers (CallContext); throws volt::Error
// when the backend lacks K or K does not take `dtype` (the kernel's dispatch dtype, named in its family header).
template <auto K, class... Args>
void call(Device device, DType dtype, Args&&... args) {
  using F = family_of<K>;
  static constexpr const char* kName = kernel_name<K>();
  static_assert(kName != nullptr, "the kernel is missing from its family's Family<>::kernels list");
  trace::Range range(trace::Layer::kernel, kName, trace::RangeInfo{device});
  const Backend* b = table(device.type);
  const auto* k = b != nullptr ? &(family<F>(*b).*K) : nullptr;
  if (k == nullptr || k->fn == nullptr || !k->dtypes.contains(dtype))
    detail::missing_kernel(kName, Family<F>::name, device, dtype, b, k != nullptr && k->fn != nullptr,
                           k != nullptr ? k->dtypes : DTypeSet{});
  if (device.is_cuda()) {
    DeviceScope scope(device);  // launches must target streams of the current device
    CallContext context(device);
    k->fn(std::forward<Args>(args)...);
    return;
  }
  CallContext context(device);
  k->fn(std::forward<Args>(args)...);
}

}  // namespace volt::backend

// The tables each backend defines (one per family, in the file of its kernels).
namespace volt::cpu {
extern const backend::ElementwiseKernels elementwise_kernels;  // kernels/cpu/elementwise.cpp
extern const backend::FactoryKernels factory_kernels;          // kernels/cpu/factory.cpp
extern const backend::ReduceKernels reduce_kernels;            // kernels/cpu/reduce.cpp
extern const backend::SoftmaxKernels softmax_kernels;          // kernels/cpu/softmax.cpp
extern const backend::LossKernels loss_kernels;                // kernels/cpu/loss.cpp
extern const backend::DropoutKernels dropout_kernels;          // kernels/cpu/dropout.cpp
extern const backend::IndexKernels index_kernels;              // kernels/cpu/index.cpp
extern const backend::AttentionKernels attention_kernels;      // kernels/cpu/attention.cpp
extern const backend::NormKernels norm_kernels;                // kernels/cpu/norm.cpp
extern const backend::BatchNormKernels batch_norm_kernels;     // kernels/cpu/batch_norm.cpp
extern const backend::OptimKernels optim_kernels;              // kernels/cpu/optim.cpp
extern const backend::LinalgKernels linalg_kernels;            // kernels/cpu/gemm.cpp
extern const backend::ConvKernels conv_kernels;                // kernels/cpu/conv.cpp
extern const backend::PoolKernels pool_kernels;                // kernels/cpu/pool.cpp
extern const backend::TensorOpKernels tensor_op_kernels;       // kernels/cpu/scan_sort.cpp
}  // namespace volt::cpu

#if VOLT_WITH_CUDA
namespace volt::cuda {
extern const backend::ElementwiseKernels elementwise_kernels;  // kernels/cuda/elementwise.cu
extern const backend::FactoryKernels factory_kernels;          // kernels/cuda/factory.cu
extern const backend::ReduceKernels reduce_kernels;            // kernels/cuda/reduce.cu
extern const backend::SoftmaxKernels softmax_kernels;          // kernels/cuda/softmax.cu
extern const backend::LossKernels loss_kernels;                // kernels/cuda/loss.cu
extern const backend::DropoutKernels dropout_kernels;          // kernels/cuda/dropout.cu
extern const backend::IndexKernels index_kernels;              // kernels/cuda/index.cu
extern const backend::AttentionKernels attention_kernels;      // kernels/cuda/attention.cu
extern const backend::NormKernels norm_kernels;                // kernels/cuda/norm.cu
extern const backend::BatchNormKernels batch_norm_kernels;     // kernels/cuda/batch_norm.cu
extern const backend::OptimKernels optim_kernels;              // kernels/cuda/optim.cu
extern const backend::LinalgKernels linalg_kernels;            // kernels/cuda/gemm.cu
extern const backend::ConvKernels conv_kernels;                // kernels/cuda/conv.cu
extern const backend::PoolKernels pool_kernels;                // kernels/cuda/pool.cu
extern const backend::TensorOpKernels tensor_op_kernels;       // kernels/cuda/scan_sort.cu
}  // namespace volt::cuda
#endif
