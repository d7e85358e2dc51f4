#pragma once
// The op side of autocast (runtime/autocast.h has the switch and the policy's table): the two casts an op
// applies to its floating inputs while autocast is on. Both are autograd casts (gradients return in the
// input's dtype) and the identity when autocast is off or the input needs no cast.
#include <volt/kernels/ops.h>
#include <volt/runtime/autocast.h>

namespace volt::autocast_detail {

// matmul / linear / conv2d inputs: f32 (and the other half type) go to the autocast dtype; f64 is left alone
// (as upstream: a double-precision model asked for double precision).
inline bool wants_lower(const Tensor& t) {
  if (!t.defined()) return false;
  const AutocastState s = autocast_state();
  const DType d = t.dtype();
  return s.enabled && d != s.dtype && (d == DType::f32 || d == DType::f16 || d == DType::bf16);
}
inline Tensor lower(const Tensor& t) { return wants_lower(t) ? cast(t, autocast_state().dtype) : t; }

// Inputs of the fp32 ops (softmax, losses, norms, reductions, exp/log/pow): f16/bf16 go to f32.
inline bool wants_fp32(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16) && autocast_enabled();
}
inline Tensor fp32(const Tensor& t) { return wants_fp32(t) ? cast(t, DType::f32) : t; }

}  // namespace volt::autocast_detail
