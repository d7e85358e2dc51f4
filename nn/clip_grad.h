#pragma once
// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_). Parameters without a gradient are
// ignored. Both modify the gradients in place.
#include <vector>

#include "kernels/ops.h"

namespace volt::nn {

// Scales all gradients by max_norm / (total_norm + 1e-6) when that is below 1, where total_norm is the
// norm_type-norm (any p > 0, or INFINITY for the max-abs norm) of all gradients taken together as one vector.
// Returns total_norm (computed in double; reading it synchronises with the device).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace volt::nn
