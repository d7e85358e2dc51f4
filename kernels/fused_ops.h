#pragma once
/// @file
/// Fused ops for transformer blocks and heads (kernels/ops/fused_ops.cpp; docs/fused_ops.md): each does in one pass
/// per row what a composition of ops.h's ops does in several, with the same checks, autograd and autocast rules.
#include <cstdint>
#include <utility>

#include <volt/kernels/ops.h>

namespace volt {

/// residual_layer_norm: x and residual (..., C) of one shape, floating dtype and device. Returns {s, y} with
/// s = x + residual (added in f32, f64 for f64, and rounded once to the dtype, as add() rounds it) and
/// y = layer_norm(s, {C}, weight, bias, eps), in one pass over each row: a pre-norm transformer block's step
/// between sublayers (s continues as the residual stream, y feeds the next sublayer). weight and bias (C) are
/// optional, in x's dtype or f32 for f16/bf16 x. The backward gives x and residual the same gradient: layer norm's
/// backward of dy plus the gradient of s's own later uses, summed in f32 in one pass; weight and bias as
/// layer_norm. Under autocast f16/bf16 inputs are added and normalised in f32 (x and residual may then differ in
/// dtype, e.g. a bf16 sublayer output and an f32 residual stream); otherwise their dtypes must match.
std::pair<Tensor, Tensor> residual_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight = Tensor(),
                                              const Tensor& bias = Tensor(), double eps = 1e-5);
/// layer_norm_for_matmul and residual_layer_norm_for_matmul: layer_norm and residual_layer_norm for a norm whose
/// output y feeds only matmuls (linear layers), as a pre-norm transformer block's two norms and the norm before its
/// head do. Under autocast to f16/bf16 the statistics are computed in f32 as layer_norm's are, and y is written in
/// the autocast dtype, the dtype the matmul casts its input to: y equals cast(layer_norm(...), dtype) and every
/// gradient is the one through that cast (the same f32 arithmetic, up to a last-place difference where the compiler
/// fuses a multiply-add differently), without the cast's extra pass over y and its f32 copy, forward and backward.
/// s stays in the residual stream's dtype (f32). A residual already in the autocast dtype (a sublayer's output)
/// beside an f32 x is read as it is, widened as a cast would widen it, and its gradient is written in its dtype by
/// the same backward pass: s and every gradient equal those of residual_layer_norm, which casts it to f32 and back.
/// Outside autocast, and for f64 inputs, they are layer_norm and residual_layer_norm.
Tensor layer_norm_for_matmul(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                             const Tensor& bias = Tensor(), double eps = 1e-5);
std::pair<Tensor, Tensor> residual_layer_norm_for_matmul(const Tensor& x, const Tensor& residual,
                                                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                                         double eps = 1e-5);
/// fused_mlp: linear(linear(x, w1, b1, act), w2, b2), a transformer block's MLP, with linear's checks, autocast and
/// values. For a GELU (whose backward reads the pre-activation) it keeps x, the pre-activation and the weights but not
/// the activation between the layers: the backward recomputes it from the pre-activation (one elementwise pass) for
/// w2's gradient, where the composition would hold it from the forward to the backward ((..., hidden) per call,
/// in the compute dtype). The recomputed activation is the activation of the stored pre-activation, which in a half
/// dtype is rounded (the forward's came from the unrounded one): w2's gradient may differ from the composition's
/// by that rounding. Other activations, and calls that need no gradient, run the composition itself. In
/// kernels/ops/linalg_ops.cpp, beside linear.
Tensor fused_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                 Activation act);

struct FusedCrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  ///< Mean (over non-ignored rows) or Sum; None is refused
  int64_t ignore_index = -100;            ///< rows with this target add nothing to the loss or the count
  int64_t chunk_rows = 0;                 ///< rows per kernel call (0: all): bounds the per-row loss buffer
  /// Write the gradient over the logits' own storage (when they are contiguous; else into a fresh tensor): the
  /// logits' values are gone after the forward, and the loss may be backpropagated once only.
  bool grad_in_logits = false;
  /// Return the loss in f32 for f16/bf16 logits also outside autocast (under autocast it is f32 anyway); f32 and
  /// f64 logits keep their dtype. The kernel's math is f32 either way: this only skips rounding the loss to half.
  bool f32_loss = false;
};
/// fused_cross_entropy: logits (N, V) (floating) and target (N) of int64 class indices. The loss equals
/// cross_entropy(logits, target, reduction, ignore_index); each row's log-sum-exp, loss and gradient
/// (softmax - onehot, times 1 / count for a mean) come from one kernel, in the forward, without a softmax tensor;
/// the backward only scales that gradient by the upstream one (a no-op, skipped on the device, when that is 1).
/// f16/bf16 logits are read in their dtype and never copied to f32: the max, log-sum-exp, loss and gradient are
/// computed in f32 and the gradient is rounded once to the logits' dtype. Unlike cross_entropy, which autocast runs
/// on f32 copies of its inputs, this op is therefore not cast under autocast (its math is f32 already). An f16
/// gradient is stored before the upstream gradient (a loss scale) is applied, so elements below f16's range
/// (about 1 / (N * V) for a mean) underflow: loss-scaled f16 training should pass f32 logits. The loss is
/// in the logits' dtype, f32 for f16/bf16 under autocast or with f32_loss; accumulation is f32 (f64 for f64).
/// Out-of-range targets are an error: on the CPU at once; on CUDA that row's loss is NaN and the error is thrown at
/// the device's next synchronisation (runtime/index_check.h).
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, const FusedCrossEntropyOptions& options = {});

struct LinearCrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  ///< Mean (over non-ignored rows) or Sum; None is refused
  int64_t ignore_index = -100;            ///< rows with this target add nothing to the loss or the count
  /// Rows of logits computed at a time. 0: the fewest equal chunks (a multiple of 64 rows) that keep each chunk's
  /// logits within kLinearCrossEntropyChunkBytes.
  int64_t chunk_rows = 0;
  bool f32_loss = false;  ///< as FusedCrossEntropyOptions::f32_loss
};
inline constexpr int64_t kLinearCrossEntropyChunkBytes = int64_t{1} << 30;
/// linear_cross_entropy: x (N, C) (floating), weight (V, C) and target (N) of int64 class indices. The loss equals
/// fused_cross_entropy(linear(x, weight), target) (a language model's tied head and its loss), but the (N, V)
/// logits never exist at once: rows are taken in chunks, and for each the product, the classifier (loss and
/// d loss / d logits, in place) and both gradient products (dx rows = dlogits @ weight, and dweight += dlogits^T @ x
/// rows) run in the forward, so memory holds one chunk of logits, dx (N, C) in the compute dtype and dweight (V, C)
/// in f32 (f64 for f64) until the backward, which only scales them by the upstream gradient. The gradient of a
/// chunk is written before the mean's 1 / count is applied (that factor joins the upstream gradient in the
/// backward), so f16 gradients do not underflow as fused_cross_entropy's would.
/// Under autocast x and weight are multiplied in its dtype, as linear does, with weight's copy made inside the op:
/// weight's gradient is accumulated in f32 over the chunks and returned in weight's own dtype (an f32 master weight
/// gets f32 without a cast node); outside autocast x and weight must have one dtype. The loss dtype follows
/// fused_cross_entropy (f32 for half under autocast or with f32_loss). The gradient is formed in the forward, so the
/// loss may be backpropagated once only and has no second derivative (both name the op). VOLT_DISABLE_KERNELS's
/// chunked_head runs the composition instead (the whole logits, then fused_cross_entropy, f16 logits in f32).
/// Out-of-range targets are an error, as fused_cross_entropy's are.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});

}  // namespace volt
