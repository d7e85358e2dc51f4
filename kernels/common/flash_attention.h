#pragma once
// cuDNN's fused flash attention inside scaled_dot_product_attention: the (b, h, s, d) views cuDNN reads, the
// parameters of the two kernels (kernels/backend/attention.h: flash_attn_fwd, flash_attn_bwd; CUDA only,
// kernels/cuda/attention_cudnn.cu), and the plain host decision of when the op may ask for them
// (kernels/ops/attention_ops.cpp), which the CPU tests exercise (tests/kernels/test_flash_attention.cpp).
// Host code only: no kernel reads these.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <volt/runtime/dtype.h>

namespace volt {

// One of q, k, v, out as cuDNN sees it: dims (b, h, s, d) and element strides, d's stride 1.
struct FlashAttnTensor {
  int64_t dim[4] = {1, 1, 1, 1};
  int64_t stride[4] = {1, 1, 1, 1};
};

struct FlashAttnParams {
  FlashAttnTensor q, k, v;  // k and v have q's (b, h)
  FlashAttnTensor o;        // the output
  // The backward's layouts, each with the dims of o, q, k, v: dO as `d_o` says, or laid out as o when unset; dQ, dK,
  // dV as `dq`, `dk`, `dv` say, or contiguous (b, h, s, d) when unset (causal_self_attention_packed writes them
  // with q's, k's and v's strides, into one (B, T, 3C) gradient).
  std::optional<FlashAttnTensor> d_o, dq, dk, dv;
  double scale = 1.0;
  bool causal = false;   // key j is kept for query i when j <= i (top-left aligned, as the fallback and PyTorch)
  bool training = false; // the forward also writes the stats (b, h, s_q, 1) f32 and the backward is planned
};

// t's dims with contiguous (b, h, s, d) strides.
inline FlashAttnTensor flash_attention_contiguous(const FlashAttnTensor& t) {
  FlashAttnTensor c = t;
  c.stride[3] = 1;
  for (int i = 3; i-- > 0;) c.stride[i] = c.stride[i + 1] * c.dim[i + 1];
  return c;
}

// The layouts the backward reads dO from and writes dQ, dK, dV to, with the defaults above resolved.
struct FlashAttnGradLayouts {
  FlashAttnTensor d_o, dq, dk, dv;
};
inline FlashAttnGradLayouts flash_attention_grad_layouts(const FlashAttnParams& p) {
  return {p.d_o.value_or(p.o), p.dq.value_or(flash_attention_contiguous(p.q)),
          p.dk.value_or(flash_attention_contiguous(p.k)), p.dv.value_or(flash_attention_contiguous(p.v))};
}

// What flash_attn_fwd reports: empty when it ran; otherwise why cuDNN refused (nothing was launched and the op
// falls back).
struct FlashAttnStatus {
  std::string refusal;
};

// What the op knows before choosing (after autocast lowered q, k and v).
struct FlashAttnRequest {
  DType dtype = DType::f32;
  int64_t batch = 0;  // product of the batch dims
  int64_t q_len = 0, k_len = 0, head_dim_qk = 0, head_dim_v = 0;
  bool batch_dims_match = true;  // q, k and v have the same batch dims (no broadcasting)
  bool has_mask = false;
  double dropout_p = 0.0;
  bool need_weights = false;     // scaled_dot_product_attention_with_weights
  int compute_capability = 0;    // major * 10 + minor; 0: not a CUDA device
};

// The oldest cuDNN whose SDPA graphs (forward and backward) Volt asks for.
inline constexpr int64_t kFlashAttnMinCudnnVersion = 90000;

// The largest head dim cuDNN's f16/bf16 SDPA takes on a device of compute capability `cc` (0 below sm_80): 128,
// and 256 on Hopper (sm_90).
inline int64_t flash_attention_max_head_dim(int cc) {
  if (cc < 80) return 0;
  return cc >= 90 && cc < 100 ? 256 : 128;
}

// Empty when cuDNN may be asked to run the request; otherwise why not, in one line.
inline std::string flash_attention_refusal(const FlashAttnRequest& r) {
  if (r.compute_capability <= 0) return "not a CUDA device";
  if (r.need_weights) return "the attention weights were asked for (cuDNN never forms them)";
  if (r.has_mask) return "attn_mask is given (only is_causal or no mask go to cuDNN)";
  if (r.dropout_p > 0.0) return "dropout_p > 0 (cuDNN's dropout would not draw Volt's Philox mask)";
  if (r.dtype != DType::f16 && r.dtype != DType::bf16)
    return std::string("dtype ") + dtype_name(r.dtype) + " (cuDNN's flash attention takes float16 or bfloat16)";
  if (r.compute_capability < 80)
    return "compute capability " + std::to_string(r.compute_capability / 10) + "." +
           std::to_string(r.compute_capability % 10) + " (cuDNN's flash attention needs 8.0 or newer)";
  if (!r.batch_dims_match) return "q, k and v have different batch dims (broadcast)";
  if (r.batch <= 0 || r.q_len <= 0 || r.k_len <= 0 || r.head_dim_qk <= 0 || r.head_dim_v <= 0)
    return "an empty dimension";
  const int64_t max_d = flash_attention_max_head_dim(r.compute_capability);
  if (r.head_dim_qk % 8 != 0 || r.head_dim_v % 8 != 0 || r.head_dim_qk > max_d || r.head_dim_v > max_d)
    return "head dims " + std::to_string(r.head_dim_qk) + " (q, k) and " + std::to_string(r.head_dim_v) +
           " (v): cuDNN needs multiples of 8 up to " + std::to_string(max_d) + " on this device";
  return {};
}

// Empty when the cuDNN library loaded at run time is new enough; `version` is cudnnGetVersion()'s number (9.19.0 is
// 91900; cuDNN 8 counted 8.9.5 as 8905).
inline std::string flash_attention_cudnn_version_refusal(int64_t version) {
  if (version >= kFlashAttnMinCudnnVersion) return {};
  return "cuDNN version " + std::to_string(version) + " (cudnnGetVersion) is older than 9.0 (" +
         std::to_string(kFlashAttnMinCudnnVersion) + ")";
}

// The (b, h, s, d) view of a tensor of shape (batch..., s, d) with element `strides`, `itemsize` bytes an element,
// first element at byte `address`: h is the last batch dim (1 without one), b the product of the others, so q, k, v
// and out, which have the same batch dims, get the same (b, h). nullopt when cuDNN cannot read the tensor as it is
// (the op then copies it contiguous): fewer than 2 dims, d's stride is not 1, the batch dims before the last do not
// step through memory as one dim, a stride of a dim longer than 1 is negative or not a multiple of 16 bytes, or the
// address is not 16-byte aligned.
inline std::optional<FlashAttnTensor> flash_attention_view(const std::vector<int64_t>& shape,
                                                           const std::vector<int64_t>& strides, size_t itemsize,
                                                           uintptr_t address) {
  const size_t n = shape.size();
  if (n < 2 || strides.size() != n || itemsize == 0 || address % 16 != 0) return std::nullopt;
  const auto usable = [&](int64_t size, int64_t stride) {
    return size <= 1 || (stride >= 0 && (static_cast<uint64_t>(stride) * itemsize) % 16 == 0);
  };
  FlashAttnTensor t;
  t.dim[3] = shape[n - 1];
  t.dim[2] = shape[n - 2];
  if (t.dim[3] > 1 && strides[n - 1] != 1) return std::nullopt;
  t.stride[2] = t.dim[2] > 1 ? strides[n - 2] : t.dim[3];  // a size-1 dim gets any aligned stride
  if (!usable(t.dim[2], t.stride[2])) return std::nullopt;
  t.dim[1] = n >= 3 ? shape[n - 3] : 1;
  t.stride[1] = t.dim[1] > 1 ? strides[n - 3] : t.stride[2] * t.dim[2];
  if (!usable(t.dim[1], t.stride[1])) return std::nullopt;
  // b: the dims before h, which must step as one (each stride = the next longer-than-1 dim's stride x size).
  int64_t b = 1, b_stride = 0, inner_stride = -1, inner_size = 1;
  for (size_t i = n >= 3 ? n - 3 : 0; i-- > 0;) {
    if (shape[i] == 1) continue;
    if (inner_stride >= 0 && strides[i] != inner_stride * inner_size) return std::nullopt;
    if (inner_stride < 0) b_stride = strides[i];  // the innermost: the merged dim's stride
    inner_stride = strides[i];
    inner_size = shape[i];
    b *= shape[i];
  }
  t.dim[0] = b;
  t.stride[0] = b > 1 ? b_stride : t.stride[1] * t.dim[1];
  if (!usable(t.dim[0], t.stride[0])) return std::nullopt;
  return t;
}

}  // namespace volt
