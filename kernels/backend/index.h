#pragma once
// Indexing and joining kernels (kernels/ops/index_ops.cpp; kernels/cpu/index.cpp, kernels/cuda/index.cu).
// Contracts (checked by the ops, assumed here):
//  - index tensors are contiguous i64 on the same device; every kernel checks each index itself, and `check`
//    names the op for the message (runtime/index_check.h: the CPU throws before using any; CUDA leaves a bad
//    index's output zero, or adds nothing for it, and records the first);
//  - "(outer, D, inner)" means a contiguous tensor viewed as three dims around the indexed dim;
//  - the *_add kernels accumulate into `out` (which the caller zero-fills) and only take f32/f64 (the ops
//    upcast 16-bit gradients so that sums are not rounded at every step); CUDA uses atomicAdd for them.
// The offset helpers below are shared by the CPU loops and the CUDA kernels.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/index_check.h>

namespace volt {

// Geometry of a gather/scatter over an index tensor of up to kIndexMaxDims dims: `sizes` is the index
// (= output) shape, `src_strides` the strides of the indexed tensor in elements, `dim_size` its size along `dim`
// (the bound of the index values).
constexpr int kIndexMaxDims = 12;
struct GatherGeometry {
  int ndim = 0;
  int dim = 0;  // the dimension whose coordinate comes from the index tensor
  int64_t dim_size = 0;
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

}  // namespace volt

namespace volt::backend {

struct IndexKernels {
  // out (outer, n, inner) = in (outer, D, inner)[:, index, :], n = index.numel(). Dispatch dtype: out's (= in's,
  // any). `check`: the op the kernel checks the indices for, against [0, D).
  Kernel<void(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
              IndexCheck check)>
      index_select;
  // out (outer, D, inner)[:, index, :] += src (outer, n, inner). Dispatch dtype: out's (f32/f64). `check`: as
  // index_select's.
  Kernel<void(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
              IndexCheck check)>
      index_add;
  // out (index shape, contiguous) = in[..., index, ...] with in's strides in g. Dispatch dtype: in's (any).
  // `check`: against [0, g.dim_size).
  Kernel<void(const Tensor& out, const Tensor& in, const Tensor& index, const GatherGeometry& g, IndexCheck check)>
      gather;
  // out (contiguous, strides in g)[..., index, ...] += src (index shape, contiguous). Dispatch dtype: out's
  // (f32/f64). `check`: as gather's.
  Kernel<void(const Tensor& out, const Tensor& src, const Tensor& index, const GatherGeometry& g, IndexCheck check)>
      scatter_add;
  // out (numel(indices), C) i64 = one-hot rows of the contiguous i64 indices. Dispatch dtype: out's (i64).
  // `check`: against [0, num_classes); a bad index's row is all zeros on CUDA.
  Kernel<void(const Tensor& out, const Tensor& indices, int64_t num_classes, IndexCheck check)> one_hot;
};

template <>
struct Family<IndexKernels> {
  static constexpr const char* name = "index";
  static constexpr std::tuple kernels{
      Named{&IndexKernels::index_select, "index_select"}, Named{&IndexKernels::index_add, "index_add"},
      Named{&IndexKernels::gather, "gather"}, Named{&IndexKernels::scatter_add, "scatter_add"},
      Named{&IndexKernels::one_hot, "one_hot"}};
};

}  // namespace volt::backend
