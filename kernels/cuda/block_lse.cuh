#pragma once
// Block-wide log-sum-exp of the row-wise softmax, loss and attention kernels (kernels/cuda/softmax.cu, loss.cu,
// attention.cu): merges the
// per-thread (max, sum-exp) states of nnmath::lse_push and an optional plain sum.
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda::rows {

// Block-wide merge of per-thread (max, sum-exp) pairs and an optional plain sum; every thread gets the result.
template <class A>
__device__ void block_lse(A& m, A& s, A& sx) {
  __shared__ A sm[kMaxThreads], ss[kMaxThreads], sxs[kMaxThreads];
  sm[threadIdx.x] = m;
  ss[threadIdx.x] = s;
  sxs[threadIdx.x] = sx;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      A m1 = sm[threadIdx.x], s1 = ss[threadIdx.x];
      nnmath::lse_merge(m1, s1, sm[threadIdx.x + k], ss[threadIdx.x + k]);
      sm[threadIdx.x] = m1;
      ss[threadIdx.x] = s1;
      sxs[threadIdx.x] += sxs[threadIdx.x + k];
    }
    __syncthreads();
  }
  m = sm[0];
  s = ss[0];
  sx = sxs[0];
  __syncthreads();
}

// The (max, sum-exp) merge alone.
template <class A>
__device__ void block_lse(A& m, A& s) {
  A unused = A(0);
  block_lse(m, s, unused);
}

}  // namespace volt::cuda::rows
