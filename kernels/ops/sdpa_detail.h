#pragma once
// Shared by scaled_dot_product_attention (attention_ops.cpp) and causal_self_attention_packed
// (attention_packed.cpp): whether a call may go to cuDNN's fused SDPA at all, and the path counters that
// sdpa_stats() (kernels/sdpa_path.h) reads. Internal to kernels/ops.
#include <string>

#include <volt/kernels/tensor.h>
#include <volt/runtime/device.h>

namespace volt::sdpa_detail {

// Why a call on `dev` cannot go to cuDNN's fused SDPA whatever its shapes ("" when it may): not a CUDA device, a
// build without cuDNN's SDPA, or VOLT_DISABLE_CUDNN_SDPA set (read at each call).
std::string cudnn_unavailable(const Device& dev);

// Counts a forward call that ran cuDNN's fused SDPA.
void note_cudnn();

// The incoming gradient of a cuDNN attention output as its backward graph reads it (dO laid out as the output):
// in `dtype`, contiguous, and 16-byte aligned (a view at an odd offset into its storage is cloned).
Tensor flash_grad_input(const Tensor& grad, DType dtype);

}  // namespace volt::sdpa_detail
