// CUDA GEMM through cuBLAS. Volt's matrices are row-major; cuBLAS is column-major, and a row-major (m, n)
// matrix is the column-major (n, m) matrix of its transpose, so C = op(A) op(B) runs as C^T = op(B)^T op(A)^T
// with the operands swapped and no data moved. Half types multiply in f32 (CUBLAS_COMPUTE_32F), and f16/bf16
// operands may accumulate into an f32 result; f32 uses TF32 tensor cores only when set_allow_tf32(true).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/cuda/gemm.h>
#include <volt/kernels/cuda/cublas_check.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>
#include <volt/runtime/cuda_graph.h>

namespace volt::cuda {

namespace {

// NVIDIA's recommended cuBLAS workspace (cublasSetWorkspace): 32 MiB from Hopper on, 4 MiB before.
size_t workspace_bytes(const Device& device) {
  return cuda_compute_capability(device.index) >= 90 ? size_t{32} << 20 : size_t{4} << 20;
}

// One handle per device, created on first use and kept for the process (cuBLAS handles are costly to make), with
// a workspace from Volt's allocator: without one cuBLAS allocates its own, also during a CUDA graph capture.
struct Handle {
  cublasHandle_t h = nullptr;
  std::shared_ptr<void> workspace;
  size_t workspace_bytes = 0;
};

// The device's handle bound to its compute stream and workspace. cublasSetStream resets the workspace to
// cuBLAS's own pool, so the workspace is set again after it.
cublasHandle_t handle_for(const Device& device) {
  static std::mutex mu;
  static std::vector<Handle> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() <= static_cast<size_t>(device.index)) handles.resize(device.index + 1);
  Handle& h = handles[device.index];
  if (!h.h) {
    VOLT_CHECK(!cuda_graph::is_capturing(device), "gemm (CUDA): the first cuBLAS call on ", device.str(),
               " ran during a CUDA graph capture, which cannot create its handle; run the step once eagerly "
               "before capturing it");
    h.workspace_bytes = workspace_bytes(device);
    h.workspace = allocate(device, h.workspace_bytes);
    VOLT_CUBLAS_CHECK(cublasCreate(&h.h));
  }
  VOLT_CUBLAS_CHECK(cublasSetStream(h.h, launch_stream()));
  VOLT_CUBLAS_CHECK(cublasSetWorkspace(h.h, h.workspace.get(), h.workspace_bytes));
  return h.h;
}

}  // namespace

void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  if (d.m == 0 || d.n == 0) return;
  DeviceScope scope(c.device());
  const bool mixed = a.dtype() != c.dtype();  // f16/bf16 operands accumulated into an f32 c
  VOLT_CHECK(b.dtype() == a.dtype() &&
                 (!mixed || (c.dtype() == DType::f32 && (a.dtype() == DType::f16 || a.dtype() == DType::bf16))),
             "gemm (CUDA): operands of dtype ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
             " with a result of dtype ", dtype_name(c.dtype()), "; expected one dtype, or f16/bf16 operands and f32");
  if (!mixed && small_gemm_suits(d, c.dtype())) return gemm_small(d, a, b, c);
  cublasHandle_t h = handle_for(c.device());

  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (c.dtype()) {
    case DType::f32:
      type = CUDA_R_32F;
      compute = d.allow_tf32 && !mixed ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::f16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::bf16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    case DType::f64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    default: VOLT_FAIL("gemm (CUDA): dtype ", dtype_name(c.dtype()), " is not supported; expected a floating dtype");
  }
  // The operands' type: c's, or f16/bf16 with an f32 c (cublasGemmEx's mixed-precision combinations).
  const cudaDataType_t ab_type = !mixed ? type : a.dtype() == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  // alpha/beta are in the compute type: double for f64, float otherwise.
  const float alpha_f = static_cast<float>(d.alpha), beta_f = static_cast<float>(d.beta);
  const double alpha_d = d.alpha, beta_d = d.beta;
  const void* alpha = c.dtype() == DType::f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = c.dtype() == DType::f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // Column-major view: C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m).
  const cublasOperation_t opb = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas_dims(d, "gemm");
  const int m = static_cast<int>(d.n), n = static_cast<int>(d.m), k = static_cast<int>(d.k);
  if (d.batch == 1) {
    VOLT_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, m, n, k, alpha, b.data_ptr(), ab_type, static_cast<int>(d.ldb),
                                   a.data_ptr(), ab_type, static_cast<int>(d.lda), beta, c.data_ptr(), type,
                                   static_cast<int>(d.ldc), compute, CUBLAS_GEMM_DEFAULT));
  } else {
    VOLT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, opb, opa, m, n, k, alpha, b.data_ptr(), ab_type, static_cast<int>(d.ldb), d.stride_b, a.data_ptr(), ab_type,
        static_cast<int>(d.lda), d.stride_a, beta, c.data_ptr(), type, static_cast<int>(d.ldc), d.stride_c,
        static_cast<int>(d.batch), compute, CUBLAS_GEMM_DEFAULT));
  }
}

void check_cublas_dims(const GemmDesc& d, const char* op) {
  VOLT_CHECK(d.m <= INT32_MAX && d.n <= INT32_MAX && d.k <= INT32_MAX && d.batch <= INT32_MAX, op,
             " (CUDA): dimensions (", d.m, ", ", d.n, ", ", d.k, ") exceed cuBLAS's 32-bit limit");
}

constexpr backend::LinalgKernels linalg_kernels{
    .gemm = {gemm, backend::kFloating},
    .linear_act_fwd = {linear_act_fwd, backend::kFloating},
    .bias_act_bwd = {bias_act_bwd, backend::kFloating},
    .matmul_act_bwd = {matmul_act_bwd, backend::kFloating},
    .gemm_bgrad = {gemm_bgrad, backend::kFloating},
};

}  // namespace volt::cuda
