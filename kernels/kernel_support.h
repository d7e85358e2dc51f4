#pragma once
/// @file
/// Which backend kernels run where. Ops run backend kernels ("gemm", "softmax_fwd", "conv2d_forward", ...;
/// kernel_names() lists them all), each implemented per device type for a set of dtypes (the backend interface is
/// internal: kernels/backend/).
#include <string>
#include <string_view>
#include <vector>

#include <volt/runtime/device.h>
#include <volt/runtime/dtype.h>

namespace volt {

/// Whether `kernel` runs on `device` for `dtype`, the dtype of the tensor the kernel computes on (the op's input,
/// or its output: for "gemm" the output, for "cast" the target dtype). False for a CUDA device that is not there:
/// in a build without CUDA, on a machine without a GPU, or at an index >= cuda_device_count(). An unknown kernel
/// name throws volt::Error listing the known ones.
///
/// An op that meets a missing kernel throws volt::Error naming the kernel, the device and the dtype. Some ops fall
/// back instead: matmul/linear, conv2d, the poolings and batch_norm compute f16/bf16 in f32 where the device has no
/// half kernel (the CPU), so conv2d works in f16 there although kernel_supported("conv2d_forward", kCPU, DType::f16)
/// is false.
bool kernel_supported(std::string_view kernel, Device device, DType dtype);

/// Every kernel's name, grouped by family (elementwise, factory, reduce, softmax, loss, dropout, index, attention,
/// norm, batch_norm, optim, linalg, conv, pool), in declaration order.
std::vector<std::string> kernel_names();

}  // namespace volt
