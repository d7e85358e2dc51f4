#pragma once
/// @file
/// More optimizers beside SGD, Adam and AdamW (nn/optim.h): RMSprop and Adagrad (torch.optim's update rules) and
/// Lion (Chen et al. 2023, as lion-pytorch), with what nn/optim.h describes for every Optimizer: parameter
/// groups, lr and the GroupOptions fields read from the groups at every step (so LR schedulers and OneCycleLR's
/// momentum cycling work), lazily created per-parameter state (fp32 for f16/bf16 parameters unless fp32_state =
/// false), state_dict keys `"state.<group>.<index>.<name>"` plus the i64 `step`, hyper_state/load_hyper_state,
/// and one fused multi-tensor update per parameter group (kernels/optim_extra.h: one launch on a GPU). They work
/// under every Trainer strategy, the sharded ones (zero1/zero2/fsdp) included, which keep any optimizer's
/// per-parameter state generically. Not under graph capture (TrainerOptions::cuda_graphs): only SGD, Adam and
/// AdamW read their per-step values from device memory; step() refuses a capture with an error.
///
/// RMSprop's alpha and centered and Adagrad's lr_decay and initial_accumulator_value are GroupOptions fields like
/// the others: a group that leaves them unset takes the optimizer's defaults when it is added, they can be changed
/// per group (group.options.alpha, or set_alpha(group, value), which checks the range), and hyper_state() saves
/// them, so a checkpoint restores them with the same range checks as the constructor.
///
/// State names (torch's): RMSprop square_avg, momentum_buffer (momentum != 0), grad_avg (centered); Adagrad sum;
/// Lion exp_avg.
#include <utility>
#include <vector>

#include <volt/nn/optim.h>

namespace volt::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  ///< smoothing constant of the squared-gradient average, in [0, 1]
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;  ///< normalise by the variance estimate (subtracts the squared gradient average)
  bool fp32_state = true;  ///< false: f16/bf16 parameters keep their state in their own dtype
};

/// torch.optim.RMSprop: g += wd * p; v = alpha * v + (1 - alpha) * g^2; centered: ga = lerp(ga, g, 1 - alpha),
/// avg = sqrt(v - ga^2) + eps, else avg = sqrt(v) + eps; momentum: buf = momentum * buf + g / avg,
/// p -= lr * buf, else p -= lr * g / avg. GroupOptions: momentum, weight_decay, eps, alpha, centered.
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  explicit RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults = {});
  void step() override;
  std::string type_name() const override { return "RMSprop"; }
  /// Always {"square_avg", "momentum_buffer", "grad_avg"} (fixed positions; a state the group's options do not
  /// use is never created, and state_dict() leaves it out).
  std::vector<std::string> state_names(const ParamGroup& group) const override;

  double alpha(size_t group) const;
  bool centered(size_t group) const;
  void set_alpha(size_t group, double alpha);
  void set_centered(size_t group, bool centered);
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;  ///< the step's lr is lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;  ///< the sum's value when it is created
  double eps = 1e-10;
  bool fp32_state = true;
};

/// torch.optim.Adagrad: g += wd * p; clr = lr / (1 + (step - 1) * lr_decay); sum += g^2;
/// p -= clr * g / (sqrt(sum) + eps). GroupOptions: weight_decay, eps, lr_decay, initial_accumulator_value.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  explicit Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults = {});
  void step() override;
  std::string type_name() const override { return "Adagrad"; }
  std::vector<std::string> state_names(const ParamGroup& group) const override { return {"sum"}; }

  double lr_decay(size_t group) const;
  double initial_accumulator_value(size_t group) const;
  void set_lr_decay(size_t group, double lr_decay);
  /// Applies to state created after the call (the sum of a parameter that has not been stepped yet).
  void set_initial_accumulator_value(size_t group, double value);
};

struct LionOptions {
  double lr = 1e-4;
  std::pair<double, double> betas = {0.9, 0.99};
  double weight_decay = 0.0;
  bool fp32_state = true;
};

/// Lion: p *= 1 - lr * wd; p -= lr * sign(beta1 * m + (1 - beta1) * g); m = beta2 * m + (1 - beta2) * g.
/// GroupOptions: beta1, beta2, weight_decay (so OneCycleLR cycles beta1, as for Adam).
class Lion : public Optimizer {
 public:
  explicit Lion(std::vector<Tensor> params, LionOptions options = {});
  explicit Lion(std::vector<ParamGroup> groups, LionOptions defaults = {});
  void step() override;
  std::string type_name() const override { return "Lion"; }
  std::vector<std::string> state_names(const ParamGroup& group) const override { return {"exp_avg"}; }
};

}  // namespace volt::optim

namespace volt::nn {
using optim::Adagrad;
using optim::AdagradOptions;
using optim::Lion;
using optim::LionOptions;
using optim::RMSprop;
using optim::RMSpropOptions;
}  // namespace volt::nn
