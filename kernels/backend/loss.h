#pragma once
// The fused class-index losses, cross_entropy and nll_loss (kernels/ops/nn_ops.cpp; kernels/cpu/loss.cpp,
// kernels/cuda/loss.cu). The math is kernels/common/softmax.h (CeParams, nnmath::ce_row_loss, ce_grad); the fused
// classifier's is kernels/common/fused.h.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct LossKernels {
  // input (n, c, inner) logits (or log-probabilities when p.nll), target i64 (n, inner), contiguous. The kernels
  // check the targets (runtime/index_check.h, for p.check): the CPU's throw before writing anything; on CUDA a bad
  // one gives that row a NaN loss and gradient and is recorded. out: (n * inner) losses for LossReduction::None,
  // else a scalar (Mean divides by the non-ignored count). lse (n * inner) and count (scalar) are in the
  // accumulation dtype (f64 for f64 input, else f32) and are saved for the backward; lse is not written when p.nll.
  // Dispatch dtype: input's (floating).
  Kernel<void(const Tensor& out, const Tensor& lse, const Tensor& count, const Tensor& input, const Tensor& target,
              int64_t n, int64_t c, int64_t inner, const CeParams& p)>
      class_loss_fwd;
  // grad_input (n, c, inner) from grad_out (a scalar, or (n * inner) for None) in input's dtype, from the saved
  // lse and count. Dispatch dtype: input's (floating).
  Kernel<void(const Tensor& grad_input, const Tensor& grad_out, const Tensor& input, const Tensor& target,
              const Tensor& lse, const Tensor& count, int64_t n, int64_t c, int64_t inner, const CeParams& p)>
      class_loss_bwd;
  // fused_cross_entropy (kernels/ops/fused_ops.cpp; math in kernels/common/fused.h). Rows [row0, row0 + rows) of
  // logits (n, v) with target i64 (n) of class indices or ignore_index (checked as class_loss_fwd's, for `check`,
  // whose position_offset is added to the row): writes each row's loss (lse - logit of the target; 0 for an ignored
  // row) to loss_rows (rows, accumulation dtype) and, when grad is defined, d loss / d logits times `scale` (1
  // element in the accumulation dtype, read on the device: 1 / the number of counted rows for a mean, 1 for a sum)
  // into the same rows of grad (n, v) in logits' dtype. grad may be logits itself: each row is
  // read completely before it is written. Dispatch dtype: logits' (floating).
  Kernel<void(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
              const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index, IndexCheck check)>
      classifier_fwd;
};

template <>
struct Family<LossKernels> {
  static constexpr const char* name = "loss";
  static constexpr std::tuple kernels{Named{&LossKernels::class_loss_fwd, "class_loss_fwd"},
                                      Named{&LossKernels::class_loss_bwd, "class_loss_bwd"},
                                      Named{&LossKernels::classifier_fwd, "classifier_fwd"}};
};

}  // namespace volt::backend
