#pragma once
// Launch shapes shared by the row-wise CUDA kernels (softmax and losses, layer/group norm, attention, row sums):
// one block per row, threads striding along the row, rows striding over a capped grid; and the block-wide sum.
#include <cstdint>

namespace volt::cuda::rows {

constexpr int kMaxThreads = 256;                    // the widest row block (shared arrays are sized by it)
constexpr unsigned kMaxRowBlocks = 65535u * 16u;    // grid cap; kernels loop over rows beyond it

// Threads per row block: a power of two in [32, kMaxThreads], no wider than the row needs.
inline int threads_for(int64_t n) {
  int t = 32;
  while (t < kMaxThreads && t < n) t *= 2;
  return t;
}

inline unsigned row_blocks(int64_t rows) {
  return rows < kMaxRowBlocks ? static_cast<unsigned>(rows) : kMaxRowBlocks;
}

#ifdef __CUDACC__
// Block-wide sum over a block of at most kMaxThreads threads (a power of two), in a fixed order; every thread
// gets it.
template <class A>
__device__ A block_sum(A v) {
  __shared__ A sv[kMaxThreads];
  sv[threadIdx.x] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) sv[threadIdx.x] += sv[threadIdx.x + k];
    __syncthreads();
  }
  v = sv[0];
  __syncthreads();
  return v;
}
#endif

}  // namespace volt::cuda::rows
