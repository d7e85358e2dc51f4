#pragma once
// Column reductions of a (rows, cols) problem that fill the GPU: each block sums a tile of kTile (runs of C) columns
// over one range of rows (blockIdx.y). With one range its sums are the result; with several, each block writes
// partials and a second kernel adds each column's partials in range order (deterministic either way). One block per
// column tile alone gives a (16384, 768) layer-norm weight gradient 24 blocks on a 132-SM GPU; split, it gets ~4
// blocks per SM, while a short reduction (a small batch's bias gradient) stays one launch.
// Used by the bias gradients (sum_cols, reduce.cu; the fused linear layer's bias_act_bwd, linear_act.cu) and
// layer_norm's weight and bias gradients (norm.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <volt/kernels/backend/scratch.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>

namespace volt::cuda::cols {

constexpr int kTile = 32, kLanes = 16;  // block (kTile, kLanes): threadIdx.x along a row, threadIdx.y over rows
constexpr int64_t kMinRowsPerSplit = 64;

// How many row ranges a reduction of `rows` rows over `tiles` column tiles on `device` is split into: enough blocks
// for ~4 per multiprocessor, each range at least kMinRowsPerSplit rows.
inline int64_t row_splits(int64_t rows, int64_t tiles, Device device) {
  const int64_t sms = cuda_multiprocessor_count(device.index);
  const int64_t want = std::max<int64_t>(1, (4 * sms + tiles - 1) / std::max<int64_t>(tiles, 1));
  const int64_t most = std::max<int64_t>(1, rows / kMinRowsPerSplit);
  return std::min<int64_t>({want, most, 65535});
}

#ifdef __CUDACC__
// Each thread owns C consecutive columns (C > 1: one 16-byte pack of a row per load, cols a multiple of C).
// Load::operator()(row, col, acc) adds the NV values of each of columns col .. col + C - 1 into acc[c * NV + v].
// With one row range (gridDim.y == 1) the block's sums go to store(col, v, sum); else to partial,
// NV x gridDim.y x cols (or nowhere when partial is null: the loads alone were wanted).
template <class A, int NV, int C, class Load, class Store>
__global__ void partial_kernel(Load load, Store store, int64_t rows, int64_t cols, int64_t rows_per_split,
                               A* partial) {
  __shared__ A buf[NV * C][kLanes][kTile + 1];
  const int64_t m = (blockIdx.x * int64_t(kTile) + threadIdx.x) * C;
  const int64_t r0 = blockIdx.y * rows_per_split, r1 = std::min<int64_t>(rows, r0 + rows_per_split);
  A acc[NV * C];
#pragma unroll
  for (int q = 0; q < NV * C; ++q) acc[q] = A(0);
  if (m < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLanes) load(r, m, acc);
#pragma unroll
  for (int q = 0; q < NV * C; ++q) buf[q][threadIdx.y][threadIdx.x] = acc[q];
  __syncthreads();
  if (threadIdx.y == 0 && m < cols)
    for (int q = 0; q < NV * C; ++q) {
      const int64_t col = m + q / NV;
      const int v = q % NV;
      A s = buf[q][0][threadIdx.x];
      for (int i = 1; i < kLanes; ++i) s += buf[q][i][threadIdx.x];
      if (gridDim.y == 1)
        store(col, v, s);
      else if (partial != nullptr)
        partial[(int64_t(v) * gridDim.y + blockIdx.y) * cols + col] = s;
    }
}

template <class A, int NV, class Store>
__global__ void finish_kernel(const A* partial, int64_t splits, int64_t cols, Store store) {
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m < cols; m += int64_t(gridDim.x) * blockDim.x)
    for (int v = 0; v < NV; ++v) {
      A s = A(0);
      for (int64_t k = 0; k < splits; ++k) s += partial[(int64_t(v) * splits + k) * cols + m];
      store(m, v, s);
    }
}

// The column sums of `rows` x `cols` elements on `device`, C columns per thread (cols a multiple of C): one
// launch when one row range suffices (row_splits), else the split launch, its partials in a stream-ordered scratch
// tensor, and the fold. With `sums` false only the loads run (a load that also writes, e.g. an activation's
// gradient, with no bias gradient wanted): no partials, no fold.
template <class A, int NV, int C = 1, class Load, class Store>
void reduce(const Load& load, const Store& store, int64_t rows, int64_t cols, Device device, bool sums = true) {
  VOLT_CHECK(cols % C == 0, "cols::reduce: ", cols, " columns are not whole runs of ", C);
  const int64_t tiles = (cols + kTile * C - 1) / (kTile * C), splits = row_splits(rows, tiles, device);
  const int64_t per = (rows + splits - 1) / splits;
  Tensor partial =
      sums && splits > 1 ? backend::scratch({NV * splits * cols}, dtype_of<A>::value, device) : Tensor();
  A* p = partial.defined() ? static_cast<A*>(partial.data_ptr()) : nullptr;
  partial_kernel<A, NV, C><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), dim3(kTile, kLanes), 0,
                          launch_stream()>>>(load, store, rows, cols, per, p);
  VOLT_CUDA_CHECK_LAUNCH();
  if (splits == 1 || !sums) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((cols + 255) / 256, 65535));
  finish_kernel<A, NV><<<blocks, 256, 0, launch_stream()>>>(p, splits, cols, store);
  VOLT_CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace volt::cuda::cols
