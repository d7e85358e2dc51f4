// CUDA reductions: row sums (one block per row), column sums (one thread per column) and arg-reductions.
#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {
// One block per row: strided partial sums, then a shared-memory tree.
template <class T>
__global__ void sum_rows_kernel(const T* in, T* out, int64_t R) {
  using A = acc_t<T>;
  __shared__ A buf[256];
  const T* row = in + blockIdx.x * R;
  A acc = A(0);
  for (int64_t r = threadIdx.x; r < R; r += blockDim.x) acc += A(row[r]);
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = T(buf[0]);
}

// One thread per column.
template <class T>
__global__ void sum_cols_kernel(const T* in, T* out, int64_t R, int64_t M) {
  using A = acc_t<T>;
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m < M; m += int64_t(gridDim.x) * blockDim.x) {
    A acc = A(0);
    for (int64_t r = 0; r < R; ++r) acc += A(in[r * M + m]);
    out[m] = T(acc);
  }
}

// Arg-reductions over the middle dim of (outer, r, inner). Short reductions (argmax over 10 classes) run one
// thread per output; long ones one block per output with a shared-memory (value, index) tree.
template <class A>
__device__ __forceinline__ bool arg_take(A v2, int64_t i2, A v1, int64_t i1, bool is_max) {
  if (nnmath::arg_better(v2, v1, is_max)) return true;
  return !nnmath::arg_better(v1, v2, is_max) && i2 < i1;  // equal (or both NaN): the earlier index wins
}

template <class T>
__global__ void arg_reduce_thread_kernel(const T* in, T* vals, int64_t* idx, int64_t outer, int64_t r,
                                         int64_t inner, bool is_max) {
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = q / inner, i = q % inner;
    const T* base = in + o * r * inner + i;
    A best = A(base[0]);
    int64_t bi = 0;
    for (int64_t k = 1; k < r; ++k) {
      A v = A(base[k * inner]);
      if (nnmath::arg_better(v, best, is_max)) { best = v; bi = k; }
    }
    idx[q] = bi;
    if (vals) vals[q] = base[bi * inner];
  }
}

template <class T>
__global__ void arg_reduce_block_kernel(const T* in, T* vals, int64_t* idx, int64_t r, int64_t inner, bool is_max) {
  using A = acc_t<T>;
  __shared__ A sv[256];
  __shared__ int64_t si[256];
  const int64_t q = blockIdx.x;
  const int64_t o = q / inner, i = q % inner;
  const T* base = in + o * r * inner + i;
  A best = A(base[0]);
  int64_t bi = 0;
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
    A v = A(base[k * inner]);
    if (arg_take(v, k, best, bi, is_max)) { best = v; bi = k; }
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && arg_take(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x], is_max)) {
      sv[threadIdx.x] = sv[threadIdx.x + s];
      si[threadIdx.x] = si[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    idx[q] = si[0];
    if (vals) vals[q] = base[si[0] * inner];
  }
}

void sum_rows(const Tensor& out, const Tensor& in) {
  const int64_t M = in.shape()[0], R = in.shape()[1];
  if (M == 0) return;
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    // Grid x is limited to 2^31-1 blocks, far above any row count here.
    sum_rows_kernel<T><<<static_cast<unsigned>(M), 256, 0, compute_stream(out)>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), R);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void sum_cols(const Tensor& out, const Tensor& in) {
  const int64_t R = in.shape()[0], M = in.shape()[1];
  if (M == 0) return;
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_cols_kernel<T><<<blocks_for(M), 256, 0, compute_stream(out)>>>(static_cast<const T*>(in.data_ptr()),
                                                                       static_cast<T*>(out.data_ptr()), R, M);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void arg_reduce(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t r,
                int64_t inner, bool is_max) {
  const int64_t total = outer * inner;
  if (total == 0) return;
  dispatch_numeric(in.dtype(), is_max ? "max" : "min", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.data_ptr());
    T* v = values.defined() ? static_cast<T*>(values.data_ptr()) : nullptr;
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    if (r <= 64) {
      arg_reduce_thread_kernel<T><<<blocks_for(total), 256, 0, compute_stream(indices)>>>(x, v, idx, outer, r, inner,
                                                                                          is_max);
    } else {
      arg_reduce_block_kernel<T><<<static_cast<unsigned>(total), 256, 0, compute_stream(indices)>>>(x, v, idx, r, inner,
                                                                                                    is_max);
    }
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::ReduceKernels reduce_kernels{
    .sum_rows = {sum_rows, backend::kNumeric},
    .sum_cols = {sum_cols, backend::kNumeric},
    .arg_reduce = {arg_reduce, backend::kNumeric},
};

}  // namespace volt::cuda
