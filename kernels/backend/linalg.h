#pragma once
// GEMM (kernels/ops/linalg_ops.cpp, matmul and linear; kernels/cpu/gemm.cpp: OpenBLAS, Eigen and a narrow AVX2
// kernel; kernels/cuda/gemm.cu: cuBLAS). The op checks arguments first; the kernel may assume valid,
// same-device, same-dtype operands.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt {

// One (possibly batched) row-major GEMM: for b in [0, batch):
//   C_b (m, n) = alpha * op(A_b) (m, k) @ op(B_b) (k, n) + beta * C_b
// op(X) = X when !trans, X^T when trans. Every matrix is row-major with a leading dimension (the distance
// between rows of the stored matrix): A is stored (m, k) when !trans_a, (k, m) when trans_a; likewise B.
// `a`, `b`, `c` are tensors whose data_ptr() is the first element of batch 0; batch b starts
// stride_* elements further (stride 0 broadcasts one matrix over the batch).
struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
  bool allow_tf32 = false;  // CUDA f32 only: TF32 tensor-core math
};

}  // namespace volt

namespace volt::backend {

struct LinalgKernels {
  // C = alpha * op(A) @ op(B) + beta * C as described by d. Dispatch dtype: c's (CPU: f32/f64, the op computes
  // f16/bf16 in f32; CUDA: floating, half types accumulate in f32).
  Kernel<void(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c)> gemm;
};

template <>
struct Family<LinalgKernels> {
  static constexpr const char* name = "linalg";
  static constexpr std::tuple kernels{Named{&LinalgKernels::gemm, "gemm"}};
};

}  // namespace volt::backend
