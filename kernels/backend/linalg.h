#pragma once
// GEMM (kernels/ops/linalg_ops.cpp, matmul and linear; kernels/cpu/gemm.cpp: OpenBLAS, Eigen and a narrow AVX2
// kernel; kernels/cuda/gemm.cu: cuBLAS, and small_gemm.cu for small f32 products) and the fused linear layer
// (kernels/cpu/linear_act.cpp, kernels/cuda/linear_act.cu: cuBLASLt epilogues, or small_gemm.cu). The op checks
// arguments first; the kernel may assume valid, same-device, same-dtype operands.
#include <cstdint>

#include <volt/kernels/activation.h>
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
  bool small_gemm = true;   // CUDA f32 only: small products may use Volt's own kernel (kernels/common/small_gemm.h)
};

}  // namespace volt

namespace volt::backend {

struct LinalgKernels {
  // C = alpha * op(A) @ op(B) + beta * C as described by d. a and b have c's dtype, except that CUDA also takes
  // f16/bf16 a and b (one dtype) with an f32 c, accumulated without rounding to half (linear_cross_entropy's weight
  // gradient over row chunks). Dispatch dtype: c's (CPU: f32/f64, the op computes f16/bf16 in f32; CUDA:
  // floating, half types accumulate in f32).
  Kernel<void(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c)> gemm;
  // The forward of a linear layer: c (m, n) = act(op(A) @ op(B) + bias), bias (n) broadcast over rows (undefined:
  // none). d as for gemm with batch 1, alpha 1, beta 0 and ldc = n (c contiguous). pre, when defined, is a
  // contiguous (m, n) tensor that receives z = op(A) @ op(B) + bias (the GELU backward reads it).
  // Dispatch dtype: c's (CPU: f32/f64, the op computes f16/bf16 in f32; CUDA: floating).
  Kernel<void(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
              const Tensor& pre, Activation act)>
      linear_act_fwd;
  // The activation and bias gradients of a linear layer, in one pass over contiguous (rows, cols) tensors:
  // grad_pre = grad_out * act'(z) and grad_bias (cols) = the column sums of grad_pre. saved is the forward's
  // output for ReLU and its pre-activation z for GELU/GELUTanh (unused for None). Either result may be undefined
  // (not computed). Dispatch dtype: grad_out's (floating).
  Kernel<void(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& saved,
              int64_t rows, int64_t cols, Activation act)>
      bias_act_bwd;
  // The backward of a linear layer's activation through the product that follows it (an MLP's second layer):
  // grad_pre (m, n) = (op(A) @ op(B)) * act'(saved) and grad_bias (n) = the column sums of grad_pre (undefined: not
  // computed), saved as for bias_act_bwd, d as for linear_act_fwd (c = grad_pre, contiguous). The product and
  // bias_act_bwd, or on CUDA for GELUTanh one cuBLASLt matmul whose DGELU (DGELU_BGRAD) epilogue applies act' (and
  // sums the bias gradient) as it writes the product, which is then never stored on its own.
  // Dispatch dtype: grad_pre's (CPU: f32/f64, the op runs the product and bias_act_bwd for half types; CUDA:
  // floating).
  Kernel<void(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
              const Tensor& saved, Activation act)>
      matmul_act_bwd;
  // A linear layer's weight and bias gradients from one read of its output gradient: c (m, n) = op(A) @ op(B) and
  // grad_bias (m) = the column sums of A, where A is the output gradient stored (k, m) contiguous (trans_a, lda =
  // m: c = dY^T @ X, grad_bias = sum over rows of dY; grad_bias defined, contiguous, of c's dtype). d as for
  // linear_act_fwd. On CUDA one cuBLASLt matmul with
  // the BGRADB epilogue when its heuristics take the shape, else the product and a column reduction; the CPU runs
  // the two. Dispatch dtype: c's (CPU: f32/f64, the op runs the two ops for half types; CUDA: floating).
  Kernel<void(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias)>
      gemm_bgrad;
};

template <>
struct Family<LinalgKernels> {
  static constexpr const char* name = "linalg";
  static constexpr std::tuple kernels{Named{&LinalgKernels::gemm, "gemm"},
                                      Named{&LinalgKernels::linear_act_fwd, "linear_act_fwd"},
                                      Named{&LinalgKernels::bias_act_bwd, "bias_act_bwd"},
                                      Named{&LinalgKernels::matmul_act_bwd, "matmul_act_bwd"},
                                      Named{&LinalgKernels::gemm_bgrad, "gemm_bgrad"}};
};

}  // namespace volt::backend
