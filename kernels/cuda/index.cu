// CUDA kernels for index_select / gather / one_hot and their scatter-add backwards: one thread per element,
// grid-stride, except a table's rows of 32 values or more (index_select and index_add with outer 1: embedding),
// a warp per row. Offsets come from the same VOLT_HD helpers as the CPU loops (kernels/backend/index.h).
// The accumulating kernels use atomicAdd because several output positions may name the same row.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cuda/index_check.cuh>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {

#define VOLT_GRID_STRIDE(t, total) \
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < (total); t += int64_t(gridDim.x) * blockDim.x)

// Element kernels, any (outer, D, inner) geometry. An index outside [0, D) is recorded and its elements are zero
// (select) or not added (add).
__device__ bool bad_element_index(int64_t t, int64_t n, int64_t inner, int64_t D, const int64_t* idx,
                                  IndexCheckRecord* rec, IndexCheck check) {
  const int64_t i = (t / inner) % n;
  return out_of_range(i, idx[i], D, rec, check, true);
}

template <class T>
__global__ void index_select_kernel(T* out, const T* in, const int64_t* idx, int64_t total, int64_t n, int64_t inner,
                                    int64_t D, IndexCheckRecord* rec, IndexCheck check) {
  VOLT_GRID_STRIDE(t, total) {
    out[t] = bad_element_index(t, n, inner, D, idx, rec, check) ? T{} : in[select_source_offset(t, n, inner, D, idx)];
  }
}

template <class T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* idx, int64_t total, int64_t n, int64_t inner,
                                 int64_t D, IndexCheckRecord* rec, IndexCheck check) {
  VOLT_GRID_STRIDE(t, total) {
    if (!bad_element_index(t, n, inner, D, idx, rec, check))
      atomicAdd(out + select_source_offset(t, n, inner, D, idx), src[t]);
  }
}

// Rows of a table (outer 1 and rows of 32 values or more: embedding, index_select along dim 0): a warp per index,
// its row moved in V-sized pieces (16 bytes when rows and pointers allow, else one element), no division per
// element. Every index is bounds-checked (one compare per row); a bad one's row is zero and recorded.
constexpr int kRowWarps = 8;  // warps per block
template <class T, class V>
__global__ void select_rows_kernel(T* out, const T* in, const int64_t* idx, int64_t n, int64_t row_vecs, int64_t D,
                                   IndexCheckRecord* rec, IndexCheck check) {
  const int lane = threadIdx.x & 31;
  for (int64_t i = blockIdx.x * int64_t(kRowWarps) + threadIdx.x / 32; i < n; i += int64_t(gridDim.x) * kRowWarps) {
    const int64_t r = idx[i];
    V* dst = reinterpret_cast<V*>(out) + i * row_vecs;
    if (out_of_range(i, r, D, rec, check, lane == 0)) {
      for (int64_t c = lane; c < row_vecs; c += 32) dst[c] = V{};
      continue;
    }
    const V* src = reinterpret_cast<const V*>(in) + r * row_vecs;
    for (int64_t c = lane; c < row_vecs; c += 32) dst[c] = src[c];
  }
}

// out (D, inner) rows += src (n, inner) rows: a warp per index, atomics per element (indices may repeat).
template <class T>
__global__ void add_rows_kernel(T* out, const T* src, const int64_t* idx, int64_t n, int64_t inner, int64_t D,
                                IndexCheckRecord* rec, IndexCheck check) {
  const int lane = threadIdx.x & 31;
  for (int64_t i = blockIdx.x * int64_t(kRowWarps) + threadIdx.x / 32; i < n; i += int64_t(gridDim.x) * kRowWarps) {
    const int64_t r = idx[i];
    if (out_of_range(i, r, D, rec, check, lane == 0)) continue;
    T* dst = out + r * inner;
    const T* row = src + i * inner;
    for (int64_t c = lane; c < inner; c += 32) atomicAdd(dst + c, row[c]);
  }
}

// Only the check, for a selection or sum of rows that have no elements (no other kernel runs to check them).
__global__ void check_indices_kernel(const int64_t* idx, int64_t n, int64_t D, IndexCheckRecord* rec,
                                     IndexCheck check) {
  VOLT_GRID_STRIDE(i, n) { out_of_range(i, idx[i], D, rec, check, true); }
}

void check_only(const int64_t* idx, int64_t n, int64_t D, IndexCheckRecord* rec, IndexCheck check) {
  if (n == 0 || rec == nullptr) return;
  check_indices_kernel<<<blocks_for(n), 256, 0, launch_stream()>>>(idx, n, D, rec, check);
  VOLT_CUDA_CHECK_LAUNCH();
}

// A bad index's output element is zero (gather) or not added (scatter_add); every element whose index is bad
// records it (the first claims the record).
template <class T>
__global__ void gather_kernel(T* out, const T* in, const int64_t* idx, int64_t total, GatherGeometry g,
                              IndexCheckRecord* rec, IndexCheck check) {
  VOLT_GRID_STRIDE(t, total) {
    const int64_t r = idx[t];
    out[t] = out_of_range(t, r, g.dim_size, rec, check, true) ? T{} : in[gather_source_offset(g, t, r)];
  }
}

template <class T>
__global__ void scatter_add_kernel(T* out, const T* src, const int64_t* idx, int64_t total, GatherGeometry g,
                                   IndexCheckRecord* rec, IndexCheck check) {
  VOLT_GRID_STRIDE(t, total) {
    const int64_t r = idx[t];
    if (out_of_range(t, r, g.dim_size, rec, check, true)) continue;
    atomicAdd(out + gather_source_offset(g, t, r), src[t]);
  }
}

// One thread per output element of the (n, C) result: no separate zero fill needed. A bad index's row is all
// zeros; the row's first element records it.
__global__ void one_hot_kernel(int64_t* out, const int64_t* idx, int64_t total, int64_t C, IndexCheckRecord* rec,
                               IndexCheck check) {
  VOLT_GRID_STRIDE(t, total) {
    const int64_t i = t / C, c = t % C, r = idx[i];
    if (out_of_range(i, r, C, rec, check, c == 0)) {
      out[t] = 0;
      continue;
    }
    out[t] = r == c ? 1 : 0;
  }
}

// f32/f64 only: the ops upcast 16-bit gradients before accumulating.
template <class F>
void dispatch_accum(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    default: VOLT_FAIL(op, ": expected a float32/float64 accumulator, got ", dtype_name(dt));
  }
}


void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
                  IndexCheck check) {
  const int64_t n = index.numel(), total = outer * n * inner;
  IndexCheckRecord* rec = index_check_record_for(out, check);
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  if (total == 0) return check_only(idx, n, D, rec, check);
  dispatch_all(in.dtype(), "index_select", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* src = static_cast<const T*>(in.data_ptr());
    if (outer == 1 && inner >= 32) {
      const size_t row_bytes = static_cast<size_t>(inner) * sizeof(T);
      const bool packed = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(src) % 16 == 0;
      const unsigned blocks = blocks_for(n, kRowWarps);
      if (packed)
        select_rows_kernel<T, uint4><<<blocks, kRowWarps * 32, 0, launch_stream()>>>(
            o, src, idx, n, static_cast<int64_t>(row_bytes / 16), D, rec, check);
      else
        select_rows_kernel<T, T><<<blocks, kRowWarps * 32, 0, launch_stream()>>>(o, src, idx, n, inner, D, rec, check);
    } else {
      index_select_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(o, src, idx, total, n, inner, D, rec,
                                                                             check);
    }
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer, int64_t D, int64_t inner,
               IndexCheck check) {
  const int64_t n = index.numel(), total = outer * n * inner;
  IndexCheckRecord* rec = index_check_record_for(out, check);
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  if (total == 0) return check_only(idx, n, D, rec, check);
  dispatch_accum(out.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
    if (outer == 1 && inner >= 32)
      add_rows_kernel<T><<<blocks_for(n, kRowWarps), kRowWarps * 32, 0, launch_stream()>>>(o, s, idx, n, inner, D, rec,
                                                                                           check);
    else
      index_add_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(o, s, idx, total, n, inner, D, rec, check);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, const GatherGeometry& g, IndexCheck check) {
  const int64_t total = out.numel();
  if (total == 0) return;
  IndexCheckRecord* rec = index_check_record_for(out, check);
  dispatch_all(in.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, g, rec, check);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void scatter_add(const Tensor& out, const Tensor& src, const Tensor& index, const GatherGeometry& g,
                 IndexCheck check) {
  const int64_t total = src.numel();
  if (total == 0) return;
  IndexCheckRecord* rec = index_check_record_for(out, check);
  dispatch_accum(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    scatter_add_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, g, rec, check);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void one_hot(const Tensor& out, const Tensor& indices, int64_t num_classes, IndexCheck check) {
  const int64_t total = indices.numel() * num_classes;
  if (total == 0) return;
  IndexCheckRecord* rec = index_check_record_for(out, check);
  one_hot_kernel<<<blocks_for(total), 256, 0, launch_stream()>>>(
      static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()), total, num_classes,
      rec, check);
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::IndexKernels index_kernels{
    .index_select = {index_select, backend::kAllDTypes},
    .index_add = {index_add, backend::kF32F64},
    .gather = {gather, backend::kAllDTypes},
    .scatter_add = {scatter_add, backend::kF32F64},
    .one_hot = {one_hot, backend::DTypeSet{DType::i64}},
};

}  // namespace volt::cuda
