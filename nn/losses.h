#pragma once
/// @file
/// Functional losses and similarities beyond kernels/ops.h (torch.nn.functional's names and defaults), composed of
/// public ops so they run on every device and dtype those do, with their gradients. Under autocast, f16/bf16
/// inputs are computed in f32 (PyTorch's fp32 list); binary_cross_entropy refuses to run under autocast, as
/// PyTorch does (use binary_cross_entropy_with_logits). Errors name the loss, the argument and the shapes.
///
/// `reduction`: Mean (over every element of the elementwise loss), Sum, or None (the elementwise loss).
#include <string_view>

#include <volt/kernels/ops.h>

namespace volt::nn {

/// -w [pos_weight * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x))], computed in the stable form
/// (1 - t) x + (1 + (pos_weight - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)).
/// input and target: one shape (target holds probabilities in [0, 1]); weight: broadcastable to it (a rescaling
/// per element), pos_weight: broadcastable, typically (C) for the last dim (the weight of positive examples per
/// class). Gradients for input, target, weight and pos_weight; the input's is w ((1 + (pw - 1) t) sigmoid(x) - pw t).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());

/// -w [t log(x) + (1 - t) log(1 - x)] for probabilities x; each log is clamped at -100 (as PyTorch), so x = 0 or 1
/// gives a finite loss. input and target: one shape; weight: broadcastable to it. Values outside [0, 1] are not
/// checked (that would read the tensor on the host).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::Mean);

/// d = input - target (broadcasting): 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta. beta >= 0; beta = 0 is
/// the L1 loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

/// d = input - target (broadcasting): 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta). delta > 0.
/// huber_loss(delta) = delta * smooth_l1_loss(beta = delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);

/// Kullback-Leibler divergence with `input` holding log-probabilities: target (log target - input) elementwise
/// (0 where target is 0), or exp(target) (target - input) with log_target. reduction: "mean" (over all elements),
/// "batchmean" (the sum divided by input.size(0): the mathematical KL divergence per sample), "sum" or "none".
/// input and target broadcast.
Tensor kl_div(const Tensor& input, const Tensor& target, std::string_view reduction = "mean", bool log_target = false);
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target = false);

/// sum(x1 * x2, dim) / (max(||x1||, eps) * max(||x2||, eps)) along `dim` of the broadcast shape (which is
/// removed). Each input is divided by its clamped norm before the product, as PyTorch, so the result stays in
/// [-1, 1].
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

}  // namespace volt::nn
