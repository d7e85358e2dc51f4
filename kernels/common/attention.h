#pragma once
// Per-element math of the fused masked, scaled softmax of scaled_dot_product_attention, shared by the CPU loop
// (kernels/cpu/attention.cpp) and the CUDA kernels (kernels/cuda/attention.cu).
//
// The softmax runs over the last dim of the scores (rows, S), rows = prod(batch dims) * L; row r is query
// i = r % L + q_offset (q_offset > 0 when the scores are a chunk of L query rows starting there). The logit of key j is
//   z_j = score_j * scale + bias_j   when key j is kept, else -inf,
// kept unless (causal and j > i) or a bool mask is false there; bias_j comes from an additive (floating) mask.
// A row with no finite logit (every key masked) gets all-zero weights instead of 0/0 = NaN.
// Everything computes in the accumulation type A (float for f32/f16/bf16, double for f64).
#include <cmath>
#include <cstdint>

#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/common/softmax.h>

namespace volt {

enum class AttnMaskKind : uint8_t {
  None,
  Keep,      // bool: true keeps the key
  Additive,  // floating, in the accumulation type: added to the scaled score (-inf masks)
};

// Where row r's mask values start: the mask is a strided view broadcast to the scores' shape (broadcast dims
// have stride 0), its row dims coalesced into at most kMaxDims (sizes / strides in elements, row-major).
struct AttnMaskGeom {
  static constexpr int kMaxDims = 6;
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  int64_t col_stride = 0;  // between keys j and j + 1 (0 when the mask broadcasts over keys)
  VOLT_HD int64_t row_offset(int64_t r) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (r % size[d]) * stride[d];
      r /= size[d];
    }
    return off;
  }
};

struct AttnParams {
  int64_t rows = 0;   // prod(batch dims) * L
  int64_t q_len = 0;  // L
  int64_t q_offset = 0;  // the query index of the scores' first row (a chunk of rows: the causal triangle moves)
  int64_t k_len = 0;  // S
  double scale = 1.0;
  bool causal = false;
  AttnMaskKind mask = AttnMaskKind::None;
  AttnMaskGeom geom;  // of the mask, when there is one
};

namespace attnmath {

template <class A>
VOLT_HD A neg_inf() { return -A(INFINITY); }

// z_j of row r (query i) for key j; `mask` points at the mask's element of (r, key 0) (nullptr without a mask).
template <class A>
VOLT_HD A logit(A score, const AttnParams& p, const void* mask, int64_t i, int64_t j) {
  if (p.causal && j > i) return neg_inf<A>();
  A bias = A(0);
  if (p.mask == AttnMaskKind::Keep) {
    if (!static_cast<const bool*>(mask)[j * p.geom.col_stride]) return neg_inf<A>();
  } else if (p.mask == AttnMaskKind::Additive) {
    bias = static_cast<const A*>(mask)[j * p.geom.col_stride];
  }
  return score * A(p.scale) + bias;
}

// The weight of logit z in a row whose online log-sum-exp state (nnmath::lse_push) is (m, s): exp(z - m) / s,
// 0 for masked keys (z = -inf) and for rows where nothing was kept (s = 0).
template <class A>
VOLT_HD A prob(A z, A m, A s) { return s > A(0) ? em::exp_(z - m) / s : A(0); }

// d(loss)/d(z_j) = y_j * (g_j - sum_k g_k y_k); zero where y_j = 0 (masked keys, fully masked rows). The score's
// gradient is this times scale; an additive mask's is this.
template <class A>
VOLT_HD A logit_grad(A y, A g, A dot) { return y * (g - dot); }

}  // namespace attnmath
}  // namespace volt
