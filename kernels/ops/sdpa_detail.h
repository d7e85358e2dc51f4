#pragma once
// Shared by scaled_dot_product_attention (attention_ops.cpp, attention_chunked.cpp) and
// causal_self_attention_packed (attention_packed.cpp): whether a call may go to cuDNN's fused SDPA at all, Volt's
// two paths, and the path counters that sdpa_stats() (kernels/sdpa_path.h) reads. Internal to kernels/ops.
#include <string>
#include <utility>

#include <volt/kernels/common/attention.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/generator.h>
#include <volt/runtime/device.h>

namespace volt::sdpa_detail {

// Why a call on `dev` cannot go to cuDNN's fused SDPA whatever its shapes ("" when it may): not a CUDA device, a
// build without cuDNN's SDPA, or VOLT_DISABLE_CUDNN_SDPA set (read at each call).
std::string cudnn_unavailable(const Device& dev);

// Counts a forward call that ran cuDNN's fused SDPA; one that chunked_attention ran (sdpa_stats' `chunked`).
void note_cudnn();
void note_chunked();

// The incoming gradient of a cuDNN attention output as its backward graph reads it (dO laid out as the output):
// in `dtype`, contiguous, and 16-byte aligned (a view at an odd offset into its storage is cloned).
Tensor flash_grad_input(const Tensor& grad, DType dtype);

// Volt's unchunked path (attention_ops.cpp): scores = q k^T, the fused masked softmax, dropout, weights v, keeping
// the weights for the backward. Returns {out, weights}. The differentiable definition the other paths' second
// derivatives go through; with `dropout_scale` (broadcastable to the weights: 1 / (1 - p) where a weight was kept, 0
// where dropped) the weights are multiplied by it instead of drawing a new dropout.
std::pair<Tensor, Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                          double dropout_p, bool is_causal, double scale, Generator* gen,
                                          const Tensor& dropout_scale = Tensor());

// Volt's path a chunk of query rows at a time (attention_chunked.cpp) for a call without weights, with q, k, v
// checked, of one dtype and device, and a mask that is undefined, bool or additive without a gradient (in the
// accumulation dtype, broadcastable to (batch..., L, S)); dropout (p in [0, 1)) draws from `gen` (the global generator
// when null): the output, or an undefined tensor when the call does not qualify (an empty dim, or
// VOLT_DISABLE_KERNELS=chunked_attention, or dropout with batch dims
// that only v has: one mask serves all of them) and the caller runs fused_attention. Batch dims may broadcast.
Tensor chunked_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                         double scale, double dropout_p, Generator* gen);

// `mask` (undefined, bool or additive) as the fused softmax reads it over scores of `shape`: sets p.mask and p.geom
// and returns the view (expanded to `shape`, or a contiguous copy when its row dims do not coalesce).
Tensor mask_view(const Tensor& mask, const Shape& shape, AttnParams& p);

}  // namespace volt::sdpa_detail
