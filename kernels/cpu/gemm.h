#pragma once
// The CPU GEMM on raw host pointers (kernels/cpu/gemm.cpp), for CPU kernels that build their own operands
// (im2col in kernels/cpu/conv.cpp). Ops reach GEMM through backend::LinalgKernels::gemm.
#include <volt/kernels/backend/linalg.h>
#include <volt/runtime/dtype.h>

namespace volt::cpu {

// d as for LinalgKernels::gemm; a, b and c point at batch 0 of f32 or f64 (dtype) matrices.
void gemm_ptr(const GemmDesc& d, DType dtype, const void* a, const void* b, void* c);

}  // namespace volt::cpu
