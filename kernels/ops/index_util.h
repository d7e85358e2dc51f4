#pragma once
// What the indexing ops (kernels/ops/index_ops.cpp) and the scatter/index adds (scan_sort_ops.cpp) share: argument
// checks, the index tensor as the kernels read it, and the geometry of a gather or scatter (kernels/backend/index.h).
#include <cstddef>
#include <cstdint>

#include <volt/kernels/backend/index.h>
#include <volt/kernels/tensor.h>

namespace volt::index_detail {

// The dtype gradients of `dt` are accumulated in.
inline DType accum_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  VOLT_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* arg) {
  VOLT_CHECK(a.device() == b.device(), op, ": argument '", arg, "' is on ", b.device().str(), " but the input is on ",
             a.device().str(), "; move it with .to(device)");
}

inline int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// Index tensors may be i64 or (where allowed) i32; kernels read contiguous i64 and check the values themselves
// (runtime/index_check.h).
inline Tensor as_index(const Tensor& index, const char* op, const char* arg, bool allow_i32) {
  VOLT_CHECK(index.dtype() == DType::i64 || (allow_i32 && index.dtype() == DType::i32), op, ": argument '", arg,
             "' must have dtype int64", allow_i32 ? " or int32" : "", ", got ", dtype_name(index.dtype()));
  Tensor idx = index.detach();
  if (idx.dtype() != DType::i64) idx = idx.to(DType::i64);
  return idx.contiguous();
}

// A gather from (or scatter into) `src` along `dim`, over an index tensor of `index_shape`.
inline GatherGeometry make_geometry(const Shape& index_shape, const Tensor& src, int64_t dim) {
  GatherGeometry g;
  g.ndim = static_cast<int>(index_shape.size());
  g.dim = static_cast<int>(dim);
  g.dim_size = src.size(dim);
  const Shape& src_strides = src.strides();
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = index_shape[d];
    g.src_strides[d] = src_strides[d];
  }
  return g;
}

}  // namespace volt::index_detail
