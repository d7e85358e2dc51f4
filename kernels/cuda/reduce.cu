#include "kernels/backend.h"
#include "kernels/common/dispatch.h"
#include "kernels/cuda/loops.cuh"

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
}  // namespace

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

}  // namespace volt::cuda
