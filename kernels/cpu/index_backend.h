#pragma once
// Backend kernels for the indexing and joining ops (kernels/ops/index_ops.cpp). Both volt::cpu (index.cpp)
// and volt::cuda (kernels/cuda/index.cu) implement every function declared here.
//
// Contracts (checked by the ops, assumed here):
//  - index tensors are contiguous i64 on the same device and every value is already range-checked;
//  - "(outer, D, inner)" means a contiguous tensor viewed as three dims around the indexed dim;
//  - the *_add kernels accumulate into `out` (which the caller zero-fills) and only take f32/f64 (the ops
//    upcast 16-bit gradients so that sums are not rounded at every step); CUDA uses atomicAdd for them.
#include <cstdint>

#include <volt/kernels/common/macros.h>
#include <volt/kernels/tensor.h>

namespace volt {

// Geometry of a gather/scatter over an index tensor of up to kIndexMaxDims dims: `sizes` is the index
// (= output) shape, `src_strides` the strides of the indexed tensor in elements.
constexpr int kIndexMaxDims = 12;
struct GatherGeometry {
  int ndim = 0;
  int dim = 0;  // the dimension whose coordinate comes from the index tensor
  int64_t sizes[kIndexMaxDims] = {};
  int64_t src_strides[kIndexMaxDims] = {};
};

// Element offset into the indexed tensor for linear position `linear` of the index tensor whose value is
// `index_value`: every coordinate is the index tensor's own, except `dim`, which is `index_value`.
VOLT_HD int64_t gather_source_offset(const GatherGeometry& g, int64_t linear, int64_t index_value) {
  int64_t off = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t i = linear % g.sizes[d];
    linear /= g.sizes[d];
    off += (d == g.dim ? index_value : i) * g.src_strides[d];
  }
  return off;
}

// Element offset into the (outer, D, inner) source for element `linear` of the (outer, n, inner) output.
VOLT_HD int64_t select_source_offset(int64_t linear, int64_t n, int64_t inner, int64_t D, const int64_t* index) {
  const int64_t k = linear % inner;
  const int64_t i = (linear / inner) % n;
  const int64_t o = linear / (inner * n);
  return (o * D + index[i]) * inner + k;
}

#define VOLT_INDEX_BACKEND_DECLS                                                                        \
  /* out (outer, n, inner) = in (outer, D, inner)[:, index, :]; any dtype */                              \
  void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t D,  \
                    int64_t inner);                                                                     \
  /* out (outer, D, inner)[:, index, :] += src (outer, n, inner); f32/f64 */                              \
  void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer, int64_t D,   \
                 int64_t inner);                                                                        \
  /* out (index shape, contiguous) = in[..., index, ...] with in's strides in g; any dtype */             \
  void gather(const Tensor& out, const Tensor& in, const Tensor& index, const GatherGeometry& g);       \
  /* out (contiguous, strides in g)[..., index, ...] += src (index shape, contiguous); f32/f64 */         \
  void scatter_add(const Tensor& out, const Tensor& src, const Tensor& index, const GatherGeometry& g); \
  /* out (numel(indices), C) i64 = one-hot rows of the contiguous i64 indices */                          \
  void one_hot(const Tensor& out, const Tensor& indices, int64_t num_classes);

namespace cpu { VOLT_INDEX_BACKEND_DECLS }
namespace cuda { VOLT_INDEX_BACKEND_DECLS }
#undef VOLT_INDEX_BACKEND_DECLS

}  // namespace volt
