// CUDA reductions: row sums (one block per row), column sums (a block per 32 columns, its rows split over the
// block's warps) and arg-reductions.
#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/col_reduce.cuh>
#include <volt/kernels/cuda/pack.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {
using rows::row_blocks;

// The sum of row[lo, hi) over a block: strided partial sums, then the block's fixed-order tree. Every thread
// gets the result.
template <class A, class I>
__device__ A block_row_sum(const I* row, int64_t lo, int64_t hi) {
  A acc = A(0);
  for (int64_t r = lo + threadIdx.x; r < hi; r += blockDim.x) acc += A(row[r]);
  return rows::block_sum(acc);
}

// One block per row (blocks stride over rows past the grid cap). I: the input type, O: the output type; the
// sum is taken in A (the second pass of a split sum reads the first pass's A partials).
template <class A, class I, class O>
__global__ void sum_rows_kernel(const I* in, O* out, int64_t M, int64_t R) {
  for (int64_t q = blockIdx.x; q < M; q += gridDim.x) {
    const A total = block_row_sum<A>(in + q * R, 0, R);
    if (threadIdx.x == 0) out[q] = O(total);
  }
}

// First pass of a split sum (few long rows, e.g. a full sum()): block (c, q) adds chunk c of row q.
template <class T>
__global__ void sum_row_chunks_kernel(const T* in, acc_t<T>* part, int64_t R, int64_t chunk, int64_t chunks) {
  using A = acc_t<T>;
  const int64_t q = blockIdx.y, c = blockIdx.x;
  const int64_t lo = c * chunk, hi = lo + chunk < R ? lo + chunk : R;
  const A total = block_row_sum<A>(in + q * R, lo, hi);
  if (threadIdx.x == 0) part[q * chunks + c] = total;
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
__global__ void arg_reduce_block_kernel(const T* in, T* vals, int64_t* idx, int64_t total, int64_t r, int64_t inner,
                                        bool is_max) {
  using A = acc_t<T>;
  __shared__ A sv[256];
  __shared__ int64_t si[256];
  for (int64_t q = blockIdx.x; q < total; q += gridDim.x) {
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
      if (threadIdx.x < s &&
          arg_take(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x], is_max)) {
        sv[threadIdx.x] = sv[threadIdx.x + s];
        si[threadIdx.x] = si[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      idx[q] = si[0];
      if (vals) vals[q] = base[si[0] * inner];
    }
    __syncthreads();  // sv/si are rewritten for the next output
  }
}

// Fewer rows than kTargetBlocks are summed in two passes when they are long enough: each row is cut into
// chunks (at least kMinChunk elements) so that about kTargetBlocks blocks share the work, one block per chunk into
// partials, then one block per row over its partials. One block per row would leave most of the GPU's
// multiprocessors idle (a conv bias gradient, 32 rows of 50k elements, took 56 us that way).
constexpr int64_t kTargetBlocks = 256, kMinChunk = 4096;

void sum_rows(const Tensor& out, const Tensor& in) {
  const int64_t M = in.shape()[0], R = in.shape()[1];
  if (M == 0) return;
  const cudaStream_t st = launch_stream();
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    const int64_t chunks = M >= kTargetBlocks ? 1
                                              : std::min((kTargetBlocks + M - 1) / M, (R + kMinChunk - 1) / kMinChunk);
    if (chunks <= 1) {
      sum_rows_kernel<A><<<row_blocks(M), rows::kMaxThreads, 0, st>>>(x, y, M, R);
      return;
    }
    const int64_t chunk = (R + chunks - 1) / chunks;
    Tensor part = empty({M * chunks * static_cast<int64_t>(sizeof(A))}, DType::u8, in.device());
    A* pp = static_cast<A*>(part.data_ptr());
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(M));
    sum_row_chunks_kernel<T><<<grid, rows::kMaxThreads, 0, st>>>(x, pp, R, chunk, chunks);
    VOLT_CUDA_CHECK_LAUNCH();
    sum_rows_kernel<A><<<row_blocks(M), rows::kMaxThreads, 0, st>>>(pp, y, M, chunks);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

// Column sums of an (R, M) matrix (a bias gradient: few columns, many rows), split over row ranges when that fills
// the GPU better (kernels/cuda/col_reduce.cuh): these load an element and store a column's total.
// C columns per thread: C == 1, or one 16-byte pack (kernels/cuda/pack.cuh) of a row per load.
template <class T, int C>
struct SumColsLoad {
  const T* in;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t m, acc_t<T>* acc) const {
    if constexpr (C == 1) {
      acc[0] += acc_t<T>(in[r * cols + m]);
    } else {
      const Pack<T> p = load_pack(in + r * cols + m);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] += acc_t<T>(p.v[c]);
    }
  }
};
template <class T>
struct SumColsStore {
  T* out;
  __device__ void operator()(int64_t m, int, acc_t<T> s) const { out[m] = T(s); }
};

void sum_cols(const Tensor& out, const Tensor& in) {
  const int64_t R = in.shape()[0], M = in.shape()[1];
  if (M == 0) return;
  dispatch_numeric(in.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.data_ptr());
    const SumColsStore<T> store{static_cast<T*>(out.data_ptr())};
    if constexpr (std::is_same_v<acc_t<T>, float>) {  // f32, f16, bf16: packs where the rows allow
      constexpr int C = Pack<T>::kLen;
      if (!kernel_paths::disabled(kernel_paths::kPackedColumns) && packable<T>(M, {x})) {
        cols::reduce<float, 1, C>(SumColsLoad<T, C>{x, M}, store, R, M, in.device());
        return;
      }
    }
    cols::reduce<acc_t<T>, 1>(SumColsLoad<T, 1>{x, M}, store, R, M, in.device());
  });
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
      arg_reduce_thread_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(x, v, idx, outer, r, inner,
                                                                                          is_max);
    } else {
      arg_reduce_block_kernel<T><<<row_blocks(total), 256, 0, launch_stream()>>>(x, v, idx, total, r, inner,
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
