#pragma once
// Backend kernels of the arg-reductions, softmax family, fused class-index losses and dropout. Both
// volt::cpu (kernels/cpu/reduce.cpp, kernels/cpu/softmax.cpp) and volt::cuda (kernels/cuda/reduce.cu,
// kernels/cuda/softmax.cu) implement every function; callers pick one with VOLT_DISPATCH_DEVICE after checking
// arguments. Tensors passed here are contiguous and on one device. Reductions over one dim see the input as
// (outer, r, inner): the reduced dim of size r sits between the flattened leading and trailing dims, so any dim
// of a contiguous tensor is reduced without a copy.
#include <cstdint>

#include <volt/kernels/backend.h>
#include <volt/kernels/common/softmax.h>

namespace volt {

#define VOLT_NN_BACKEND_DECLS                                                                                   \
  /* in (outer, r, inner) -> indices i64 (outer, inner) and, when defined, values (outer, inner) in in's dtype; \
     the first extremum wins, NaN counts as the extremum. r >= 1. */                                           \
  void arg_reduce(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t r,     \
                  int64_t inner, bool is_max);                                                                 \
  /* out = softmax or log_softmax of in over the middle dim of (outer, r, inner); same dtype. */              \
  void softmax_fwd(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log);    \
  /* input (n, c, inner) logits (or log-probabilities when p.nll), target i64 (n, inner) with valid indices.   \
     out: (n * inner) losses for None, else a scalar (mean divides by the non-ignored count).                  \
     lse (n * inner) and count (scalar) are in the accumulation dtype (f64 for f64 input, else f32) and are   \
     saved for the backward; lse is not written when p.nll. */                                               \
  void class_loss_fwd(const Tensor& out, const Tensor& lse, const Tensor& count, const Tensor& input,          \
                      const Tensor& target, int64_t n, int64_t c, int64_t inner, const CeParams& p);           \
  /* grad_input (n, c, inner) from grad_out (a scalar, or (n * inner) for None) in input's dtype. */           \
  void class_loss_bwd(const Tensor& grad_input, const Tensor& grad_out, const Tensor& input,                   \
                      const Tensor& target, const Tensor& lse, const Tensor& count, int64_t n, int64_t c,      \
                      int64_t inner, const CeParams& p);                                                       \
  /* out = in * keep / (1 - p), mask (bool) = keep, keep_i = philox uniform(seed, offset, i) >= p. */           \
  void dropout_fwd(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset,     \
                   double p);                                                                                  \
  /* grad_in = mask ? grad_out * scale : 0 */                                                                  \
  void dropout_bwd(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale);

namespace cpu { VOLT_NN_BACKEND_DECLS }
namespace cuda { VOLT_NN_BACKEND_DECLS }
#undef VOLT_NN_BACKEND_DECLS

}  // namespace volt
