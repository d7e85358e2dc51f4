// CUDA fused masked, scaled softmax of scaled_dot_product_attention: one block per row of keys. The math is
// kernels/common/attention.h; this file holds indexing and launches only. Contracts are in
// kernels/backend/attention.h.
#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cuda/block_lse.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {

using rows::block_lse;
using rows::block_sum;
using rows::kMaxRowBlocks;
using rows::kMaxThreads;
using rows::row_blocks;
using rows::threads_for;

// The mask's element for (row r, key 0), or nullptr without a mask.
__device__ __forceinline__ const void* mask_row(const char* mask, int64_t itemsize, const AttnParams& p, int64_t r) {
  return p.mask == AttnMaskKind::None ? nullptr : mask + p.geom.row_offset(r) * itemsize;
}

template <class T>
__global__ void attn_softmax_fwd_kernel(const T* x, T* y, const char* mask, int64_t mask_itemsize, AttnParams p) {
  using A = acc_t<T>;
  const int64_t S = p.k_len;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* xr = x + r * S;
    T* yr = y + r * S;
    const void* mr = mask_row(mask, mask_itemsize, p, r);
    const int64_t i = r % p.q_len + p.q_offset;
    A m = attnmath::neg_inf<A>(), s = A(0);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) nnmath::lse_push(m, s, attnmath::logit(A(xr[j]), p, mr, i, j));
    block_lse(m, s);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
      yr[j] = T(attnmath::prob(attnmath::logit(A(xr[j]), p, mr, i, j), m, s));
  }
}

template <class T>
__global__ void attn_softmax_bwd_kernel(T* gs, acc_t<T>* gb, const T* g, const T* y, AttnParams p) {
  using A = acc_t<T>;
  const int64_t S = p.k_len;
  const A scale = A(p.scale);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t o = r * S;
    A dot = A(0);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) dot += A(g[o + j]) * A(y[o + j]);
    dot = block_sum(dot);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
      const A dz = attnmath::logit_grad(A(y[o + j]), A(g[o + j]), dot);
      gs[o + j] = T(dz * scale);
      if (gb) gb[o + j] = dz;
    }
  }
}


void attn_softmax_fwd(const Tensor& out, const Tensor& scores, const Tensor& mask, const AttnParams& p) {
  if (p.rows == 0 || p.k_len == 0) return;
  const char* mp = mask.defined() ? static_cast<const char*>(mask.data_ptr()) : nullptr;
  const int64_t item = mask.defined() ? static_cast<int64_t>(itemsize(mask.dtype())) : 0;
  dispatch_floating(scores.dtype(), "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    attn_softmax_fwd_kernel<T><<<row_blocks(p.rows), threads_for(p.k_len), 0, launch_stream()>>>(
        static_cast<const T*>(scores.data_ptr()), static_cast<T*>(out.data_ptr()), mp, item, p);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void attn_softmax_bwd(const Tensor& grad_scores, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& weights,
                      const AttnParams& p) {
  if (p.rows == 0 || p.k_len == 0) return;
  dispatch_floating(weights.dtype(), "scaled_dot_product_attention backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    attn_softmax_bwd_kernel<T><<<row_blocks(p.rows), threads_for(p.k_len), 0, launch_stream()>>>(
        static_cast<T*>(grad_scores.data_ptr()), grad_bias.defined() ? static_cast<A*>(grad_bias.data_ptr()) : nullptr,
        static_cast<const T*>(grad_out.data_ptr()), static_cast<const T*>(weights.data_ptr()), p);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

#if VOLT_CUDNN_SDPA  // cuDNN's fused SDPA (attention_cudnn.cu), in a build that found the cuDNN frontend headers
void flash_attn_fwd(const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
                    const FlashAttnParams& p, FlashAttnStatus* status);
void flash_attn_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& dout, const Tensor& stats,
                    const FlashAttnParams& p);
#endif

constexpr backend::AttentionKernels attention_kernels{
    .attn_softmax_fwd = {attn_softmax_fwd, backend::kFloating},
    .attn_softmax_bwd = {attn_softmax_bwd, backend::kFloating},
#if VOLT_CUDNN_SDPA
    .flash_attn_fwd = {flash_attn_fwd, {DType::f16, DType::bf16}},
    .flash_attn_bwd = {flash_attn_bwd, {DType::f16, DType::bf16}},
#else
    .flash_attn_fwd = {},
    .flash_attn_bwd = {},
#endif
};

}  // namespace volt::cuda
