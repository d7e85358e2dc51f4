#pragma once
// The CUDA linear-algebra kernels, for the linalg_kernels table in kernels/cuda/gemm.cu (contracts in
// kernels/backend/linalg.h): the cuBLAS GEMM (gemm.cu) and the fused linear layer (linear_act.cu), which falls
// back to the GEMM plus one bias/activation kernel where a cuBLASLt epilogue does not apply; and Volt's own kernel
// for small f32 products (small_gemm.cu), which both take first where it suits.
#include <volt/kernels/backend/linalg.h>

namespace volt::cuda {

void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c);
// d's dimensions and batch fit cuBLAS's 32-bit ints; else a volt::Error naming `op` (e.g. "gemm").
void check_cublas_dims(const GemmDesc& d, const char* op);
void linear_act_fwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                    const Tensor& pre, Activation act);
// Volt's GEMM for small f32 outputs (small_gemm.cu; kernels/common/small_gemm.h): whether it takes a product,
// and the product as a GEMM (alpha, beta) or as the linear layer's forward (bias, activation, pre-activation).
bool small_gemm_suits(const GemmDesc& d, DType dtype);
void gemm_small(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c);
void linear_act_small(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                      const Tensor& pre, Activation act);
void bias_act_bwd(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& saved,
                  int64_t rows, int64_t cols, Activation act);
void matmul_act_bwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
                    const Tensor& saved, Activation act);
void gemm_bgrad(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias);

}  // namespace volt::cuda
