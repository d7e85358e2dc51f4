// CUDA softmax / log_softmax: one block per row of the softmax dim. The math is kernels/common/softmax.h;
// this file holds indexing and launches only.
#include <limits>

#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/block_lse.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {

using rows::block_lse;
using rows::row_blocks;
using rows::threads_for;

// One block per (outer, inner) row of the softmax dim; blocks stride over rows past the grid cap.
template <class T>
__global__ void softmax_kernel(const T* in, T* out, int64_t rows, int64_t r, int64_t inner, bool log) {
  using A = acc_t<T>;
  for (int64_t q = blockIdx.x; q < rows; q += gridDim.x) {
    const int64_t o = q / inner, i = q % inner;
    const T* x = in + o * r * inner + i;
    T* y = out + o * r * inner + i;
    A m = -std::numeric_limits<A>::infinity(), s = A(0), unused = A(0);
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) nnmath::lse_push(m, s, A(x[k * inner]));
    block_lse(m, s, unused);
    const A lse = nnmath::lse_finish(m, s);
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
      A v = A(x[k * inner]) - lse;
      y[k * inner] = log ? T(v) : T(em::exp_(v));
    }
  }
}

void softmax_fwd(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  const int64_t rows = outer * inner;
  if (rows == 0 || r == 0) return;
  dispatch_floating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<row_blocks(rows), threads_for(r), 0, launch_stream()>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), rows, r, inner, log);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::SoftmaxKernels softmax_kernels{.softmax_fwd = {softmax_fwd, backend::kFloating}};

}  // namespace volt::cuda
