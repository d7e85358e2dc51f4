#pragma once
// The GEMM as the ops call it (defined in kernels/ops/linalg_ops.cpp, used there and by linear_cross_entropy in
// kernels/ops/fused_ops.cpp): operand layouts become cuBLAS/BLAS transpose flags and leading dimensions, and the
// CPU's half-precision products run in f32.
#include <volt/kernels/tensor.h>

namespace volt::linalg_detail {

// out (batch..., n, m) = op(a) (batch..., n, k) @ op(b) (batch..., k, m) [+ out when accumulate],
// op(t) = t, or its last-two-dims transpose when ta/tb (saves building a transposed view per call). a and b are
// only read (never recorded), are on out's device, already have out's batch dims (possibly expanded), and have
// out's dtype, or are f16/bf16 (one dtype) with an f32 out: the product then accumulates into out in f32 (on the
// CPU from f32 copies of the operands, on CUDA in one cuBLAS call), never rounded to half. out may be a view whose
// rows have unit stride and whose batch dims step by one stride (a narrow of rows, as attention's and the head's
// chunks write); the GEMM then writes it in place, and any other view goes through a contiguous copy.
void gemm_into(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, bool ta = false,
               bool tb = false);

}  // namespace volt::linalg_detail
