#pragma once
// The CPU GEMM on raw host pointers (kernels/cpu/gemm.cpp), for CPU kernels that build their own operands
// (im2col in kernels/cpu/conv.cpp). Ops reach GEMM through backend::LinalgKernels::gemm.
#include <volt/kernels/backend/linalg.h>
#include <volt/runtime/dtype.h>

namespace volt::cpu {

// d as for LinalgKernels::gemm; a, b and c point at batch 0 of f32 or f64 (dtype) matrices.
void gemm_ptr(const GemmDesc& d, DType dtype, const void* a, const void* b, void* c);

// The fused linear layer's kernels (kernels/cpu/linear_act.cpp), listed in gemm.cpp's linalg_kernels table;
// contracts in kernels/backend/linalg.h.
void linear_act_fwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                    const Tensor& pre, Activation act);
void bias_act_bwd(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& saved,
                  int64_t rows, int64_t cols, Activation act);
void matmul_act_bwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
                    const Tensor& saved, Activation act);
void gemm_bgrad(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias);

}  // namespace volt::cpu
