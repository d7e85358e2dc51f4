#pragma once
// Scan, sort and flip kernels behind the ops of kernels/tensor_ops.h (kernels/ops/tensor_ops*.cpp;
// kernels/cpu/scan_sort.cpp, kernels/cuda/scan_sort.cu). Contracts (checked by the ops, assumed here):
//  - "(outer, D, inner)" is a contiguous tensor viewed as three dims around the scanned / sorted dim;
//  - scans run along D sequentially per (outer, inner) line, accumulating half types in f32 (common/scan.h);
//  - sort orders each line by common/sort.h's sort_before (a strict total order: NaN after every number when
//    ascending, before when descending; equal keys by position), so CPU and CUDA results agree exactly and ties
//    come out in the order of a stable sort.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/macros.h>
#include <volt/kernels/tensor.h>

namespace volt {

// A strided read of a tensor of up to kFlipMaxDims dims with some dims reversed.
constexpr int kFlipMaxDims = 12;
struct FlipGeometry {
  int ndim = 0;
  int64_t sizes[kFlipMaxDims] = {};
  int64_t in_strides[kFlipMaxDims] = {};
  bool flip[kFlipMaxDims] = {};
};

// Element offset into `in` for element `linear` of the contiguous output.
VOLT_HD int64_t flip_source_offset(const FlipGeometry& g, int64_t linear) {
  int64_t off = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t i = linear % g.sizes[d];
    linear /= g.sizes[d];
    off += (g.flip[d] ? g.sizes[d] - 1 - i : i) * g.in_strides[d];
  }
  return off;
}

}  // namespace volt

namespace volt::backend {

struct TensorOpKernels {
  // out (outer, D, inner) = inclusive prefix sums of in along D (suffix sums when reverse). Dispatch dtype:
  // out's (= in's; numeric).
  Kernel<void(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner, bool reverse)> cumsum;
  // out (outer, D, inner) = inclusive prefix products of in along D. Dispatch dtype: out's (= in's; numeric).
  Kernel<void(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner)> cumprod;
  // grad_in (outer, D, inner) = the gradient of cumprod(in) for grad_out, exact where `in` has zeros.
  // Dispatch dtype: grad_in's (= grad_out's = in's; f32/f64).
  Kernel<void(const Tensor& grad_in, const Tensor& grad_out, const Tensor& in, int64_t outer, int64_t D,
              int64_t inner)>
      cumprod_backward;
  // values (outer, k, inner) and i64 indices (outer, k, inner) = the first k elements of every line of
  // in (outer, D, inner) in sort order (1 <= k <= D). Dispatch dtype: in's (any).
  Kernel<void(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t D, int64_t inner,
              int64_t k, bool descending)>
      sort;
  // out (g.sizes, contiguous) = in (strides g.in_strides) read with the dims in g.flip reversed. Dispatch dtype:
  // out's (= in's; any).
  Kernel<void(const Tensor& out, const Tensor& in, const FlipGeometry& g)> flip;
};

template <>
struct Family<TensorOpKernels> {
  static constexpr const char* name = "tensor_ops";
  static constexpr std::tuple kernels{
      Named{&TensorOpKernels::cumsum, "cumsum"}, Named{&TensorOpKernels::cumprod, "cumprod"},
      Named{&TensorOpKernels::cumprod_backward, "cumprod_backward"}, Named{&TensorOpKernels::sort, "sort"},
      Named{&TensorOpKernels::flip, "flip"}};
};

}  // namespace volt::backend
