// CUDA kernels for index_select / gather / one_hot and their scatter-add backwards: one thread per element,
// grid-stride. Offsets come from the same VOLT_HD helpers as the CPU loops (kernels/backend/index.h).
// The accumulating kernels use atomicAdd because several output positions may name the same row.
#include <cuda_runtime.h>

#include <type_traits>

#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {

#define VOLT_GRID_STRIDE(t, total) \
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < (total); t += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void index_select_kernel(T* out, const T* in, const int64_t* idx, int64_t total, int64_t n, int64_t inner,
                                    int64_t D) {
  VOLT_GRID_STRIDE(t, total) { out[t] = in[select_source_offset(t, n, inner, D, idx)]; }
}

template <class T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* idx, int64_t total, int64_t n, int64_t inner,
                                 int64_t D) {
  VOLT_GRID_STRIDE(t, total) { atomicAdd(out + select_source_offset(t, n, inner, D, idx), src[t]); }
}

template <class T>
__global__ void gather_kernel(T* out, const T* in, const int64_t* idx, int64_t total, GatherGeometry g) {
  VOLT_GRID_STRIDE(t, total) { out[t] = in[gather_source_offset(g, t, idx[t])]; }
}

template <class T>
__global__ void scatter_add_kernel(T* out, const T* src, const int64_t* idx, int64_t total, GatherGeometry g) {
  VOLT_GRID_STRIDE(t, total) { atomicAdd(out + gather_source_offset(g, t, idx[t]), src[t]); }
}

// One thread per output element of the (n, C) result: no separate zero fill needed.
__global__ void one_hot_kernel(int64_t* out, const int64_t* idx, int64_t total, int64_t C) {
  VOLT_GRID_STRIDE(t, total) { out[t] = (idx[t / C] == t % C) ? 1 : 0; }
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


void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = index.numel(), total = outer * n * inner;
  if (total == 0) return;
  dispatch_all(in.dtype(), "index_select", [&](auto tag) {
    using T = decltype(tag);
    index_select_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, n, inner, D);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = index.numel(), total = outer * n * inner;
  if (total == 0) return;
  dispatch_accum(out.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    index_add_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, n, inner, D);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, const GatherGeometry& g) {
  const int64_t total = out.numel();
  if (total == 0) return;
  dispatch_all(in.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, g);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void scatter_add(const Tensor& out, const Tensor& src, const Tensor& index, const GatherGeometry& g) {
  const int64_t total = src.numel();
  if (total == 0) return;
  dispatch_accum(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    scatter_add_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), total, g);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void one_hot(const Tensor& out, const Tensor& indices, int64_t num_classes) {
  const int64_t total = indices.numel() * num_classes;
  if (total == 0) return;
  one_hot_kernel<<<blocks_for(total), 256, 0, launch_stream()>>>(
      static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()), total, num_classes);
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
