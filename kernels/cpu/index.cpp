// CPU kernels for index_select / gather / embedding / one_hot and their scatter-add backwards. The offset
// arithmetic is shared with the CUDA kernels (kernels/backend/index.h); loops here are serial, so the
// accumulating kernels need no atomics.
#include <cstring>
#include <type_traits>

#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

// The kernels' own check (runtime/index_check.h): every index, before any is used.
void check_indices(const int64_t* idx, int64_t n, int64_t D, IndexCheck check) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= D)
      VOLT_FAIL(detail::index_check_message(check, check.position_offset + i, idx[i], D));
}

void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
                  IndexCheck check) {
  const int64_t n = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, n, D, check);
  const size_t row_bytes = static_cast<size_t>(inner) * itemsize(in.dtype());
  if (row_bytes == 0) return;  // rows with no elements: only the check
  // A whole inner row moves at once: for embedding (outer 1, inner D) that is one memcpy per token.
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<size_t>(o * n + i) * row_bytes, src + static_cast<size_t>(o * D + idx[i]) * row_bytes,
                  row_bytes);
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
               IndexCheck check) {
  const int64_t n = index.numel();
  const int64_t total = outer * n * inner;
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, n, D, check);
  dispatch_floating(out.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* o = static_cast<T*>(out.data_ptr());
      const T* s = static_cast<const T*>(src.data_ptr());
      for (int64_t t = 0; t < total; ++t) o[select_source_offset(t, n, inner, D, idx)] += s[t];
    } else {
      VOLT_FAIL("index_add: expected a float32/float64 accumulator, got ", dtype_name(out.dtype()));
    }
  });
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, const GatherGeometry& g, IndexCheck check) {
  const int64_t total = out.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, total, g.dim_size, check);
  dispatch_all(in.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* a = static_cast<const T*>(in.data_ptr());
    for (int64_t t = 0; t < total; ++t) o[t] = a[gather_source_offset(g, t, idx[t])];
  });
}

void scatter_add(const Tensor& out, const Tensor& src, const Tensor& index, const GatherGeometry& g,
                 IndexCheck check) {
  const int64_t total = src.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, total, g.dim_size, check);
  dispatch_floating(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* o = static_cast<T*>(out.data_ptr());
      const T* s = static_cast<const T*>(src.data_ptr());
      for (int64_t t = 0; t < total; ++t) o[gather_source_offset(g, t, idx[t])] += s[t];
    } else {
      VOLT_FAIL("scatter_add: expected a float32/float64 accumulator, got ", dtype_name(out.dtype()));
    }
  });
}

void one_hot(const Tensor& out, const Tensor& indices, int64_t num_classes, IndexCheck check) {
  const int64_t n = indices.numel();
  const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
  check_indices(idx, n, num_classes, check);
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  std::memset(o, 0, static_cast<size_t>(n * num_classes) * sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) o[i * num_classes + idx[i]] = 1;
}

}  // namespace

constexpr backend::IndexKernels index_kernels{
    .index_select = {index_select, backend::kAllDTypes},
    .index_add = {index_add, backend::kF32F64},
    .gather = {gather, backend::kAllDTypes},
    .scatter_add = {scatter_add, backend::kF32F64},
    .one_hot = {one_hot, backend::DTypeSet{DType::i64}},
};

}  // namespace volt::cpu
