#pragma once
// Launch shapes shared by the row-wise CUDA kernels (softmax and losses, layer/group norm, attention): one block
// per row, threads striding along the row, rows striding over a capped grid.
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

}  // namespace volt::cuda::rows
