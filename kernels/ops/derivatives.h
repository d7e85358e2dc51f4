#pragma once
// Derivatives that several ops' backward formulas share, written in differentiable ops so that formulas using
// them can be recorded under create_graph (kernels/grad.h).
#include <volt/kernels/ops.h>

namespace volt {

/// gelu'(x) (the exact form, or the tanh approximation's), differentiable in x to any order.
Tensor gelu_derivative(const Tensor& x, bool tanh_form);

}  // namespace volt
