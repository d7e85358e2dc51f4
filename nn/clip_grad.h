#pragma once
/// @file
/// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_). Parameters without a gradient are
/// ignored. Both modify the gradients in place.
#include <functional>
#include <vector>

#include <volt/kernels/ops.h>

namespace volt::nn {

/// Scales all gradients by max_norm / (total_norm + 1e-6) when that is below 1, where total_norm is the
/// norm_type-norm (any p > 0, or INFINITY for the max-abs norm) of all gradients taken together as one vector.
/// Returns total_norm (computed in double; reading it synchronises with the device: on a GPU this is the
/// computation of clip_grad_norm_no_sync_ followed by one read of its result).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

/// The same clipping without any read back to the host: the partial norms (accumulated in f64), their
/// combination, the coefficient min(max_norm / (total_norm + 1e-6), 1) (NaN when total_norm is NaN) and the
/// in-place scaling of every gradient all run as device ops on the gradients' stream. Returns total_norm as a
/// 0-dim f64 tensor on the gradients' device (a 0 on the parameters' device when no parameter has a gradient).
/// Gradients scaled by a coefficient of exactly 1 are unchanged. The reductions run in a different order from
/// clip_grad_norm_'s CPU loop, so on the CPU the two agree to rounding, not bit for bit.
Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

/// Sharded gradients (each rank holds a slice of one gradient vector, as under ZeRO): `reduce` combines every
/// rank's partial in place into the total over ranks, a 0-dim f64 tensor on the gradients' device holding this
/// rank's sum of |g|^norm_type (for INFINITY: its max |g|, and is_max is true), so total_norm and the clip
/// coefficient are those of all ranks' gradients together. Every rank must call it (one collective), also a rank
/// without gradients (its partial is 0).
using NormPartialReduce = std::function<void(Tensor& partial, bool is_max)>;
Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                               const NormPartialReduce& reduce);

/// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace volt::nn
