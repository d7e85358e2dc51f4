#pragma once
// Derivatives that several ops' backward formulas share, written in differentiable ops so that formulas using
// them can be recorded under create_graph (kernels/grad.h).
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/ops.h>

namespace volt {

/// gelu'(x) (the exact form, or the tanh approximation's), differentiable in x to any order.
Tensor gelu_derivative(const Tensor& x, bool tanh_form);

/// conv2d's backward products, differentiable to any order (kernels/ops/conv_ops.cpp): for y = conv2d(x, w) with
/// parameters p and upstream gradient g, the input gradient (of shape x_shape) and the weight gradient (of shape
/// w_shape). conv_transpose2d's forward is conv2d_data_grad.
Tensor conv2d_data_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const Conv2dParams& p);
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& w_shape, const Conv2dParams& p);

}  // namespace volt
