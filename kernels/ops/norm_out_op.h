#pragma once
// layer_norm with its output in a chosen dtype, for the fused ops (kernels/ops/fused_ops.cpp: layer_norm_for_matmul).
#include <volt/kernels/tensor.h>

namespace volt::norm_detail {

// layer_norm(x, normalized_shape, weight, bias, eps) with the same checks, no autocast, and the output (and the
// gradient it takes) in out_dtype: x's dtype, or f16/bf16 for f32 x, rounded once from the f32 result.
Tensor layer_norm_to(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                     double eps, DType out_dtype);

}  // namespace volt::norm_detail
