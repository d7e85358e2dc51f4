// CPU fused masked, scaled softmax of scaled_dot_product_attention, a row of keys at a time. The math is
// kernels/common/attention.h; contracts are in kernels/backend/attention.h.
#include <vector>

#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

// The mask's element for (row r, key 0), or nullptr without a mask.
const void* mask_row(const Tensor& mask, const AttnParams& p, int64_t r) {
  if (p.mask == AttnMaskKind::None) return nullptr;
  const char* base = static_cast<const char*>(mask.data_ptr());
  return base + p.geom.row_offset(r) * static_cast<int64_t>(itemsize(mask.dtype()));
}

void attn_softmax_fwd(const Tensor& out, const Tensor& scores, const Tensor& mask, const AttnParams& p) {
  dispatch_floating(scores.dtype(), "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(scores.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    const int64_t S = p.k_len;
    std::vector<A> z(static_cast<size_t>(S));
    for (int64_t r = 0; r < p.rows; ++r) {
      const T* xr = x + r * S;
      T* yr = y + r * S;
      const void* mr = mask_row(mask, p, r);
      const int64_t i = r % p.q_len + p.q_offset;
      // Two passes over the row (max, then exp and sum) instead of the CUDA kernel's online lse_push: one exp per
      // key, and loops the compiler vectorises. The same logits, the same weights up to rounding.
      A m = attnmath::neg_inf<A>();
      for (int64_t j = 0; j < S; ++j) {
        z[j] = attnmath::logit(A(xr[j]), p, mr, i, j);
        m = z[j] > m ? z[j] : m;
      }
      if (!(m > attnmath::neg_inf<A>())) {  // no key kept: zero weights, not 0/0
        for (int64_t j = 0; j < S; ++j) yr[j] = T(A(0));
        continue;
      }
      A s = A(0);
      for (int64_t j = 0; j < S; ++j) {
        z[j] = em::exp_(z[j] - m);
        s += z[j];
      }
      const A inv = A(1) / s;
      for (int64_t j = 0; j < S; ++j) yr[j] = T(z[j] * inv);
    }
  });
}

void attn_softmax_bwd(const Tensor& grad_scores, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& weights,
                      const AttnParams& p) {
  dispatch_floating(weights.dtype(), "scaled_dot_product_attention backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* y = static_cast<const T*>(weights.data_ptr());
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    T* gs = static_cast<T*>(grad_scores.data_ptr());
    A* gb = grad_bias.defined() ? static_cast<A*>(grad_bias.data_ptr()) : nullptr;
    const int64_t S = p.k_len;
    const A scale = A(p.scale);
    for (int64_t r = 0; r < p.rows; ++r) {
      const int64_t o = r * S;
      A dot = A(0);
      for (int64_t j = 0; j < S; ++j) dot += A(g[o + j]) * A(y[o + j]);
      for (int64_t j = 0; j < S; ++j) {
        const A dz = attnmath::logit_grad(A(y[o + j]), A(g[o + j]), dot);
        gs[o + j] = T(dz * scale);
        if (gb) gb[o + j] = dz;
      }
    }
  });
}

}  // namespace

constexpr backend::AttentionKernels attention_kernels{
    .attn_softmax_fwd = {attn_softmax_fwd, backend::kFloating},
    .attn_softmax_bwd = {attn_softmax_bwd, backend::kFloating},
    .flash_attn_fwd = {},  // cuDNN only: on the CPU the op always runs the fused softmax above
    .flash_attn_bwd = {},
};

}  // namespace volt::cpu
