#pragma once
/// @file
/// Optimizers (torch.optim): SGD, Adam, AdamW.
///
/// An optimizer holds parameter groups, each with its own lr and typed options (GroupOptions: momentum, beta1,
/// weight_decay, ...); options a group leaves unset take the optimizer's defaults when the group is added, and
/// an option the optimizer does not have (beta1 on SGD) is refused there. step() reads lr and options from the
/// groups every time, so schedulers (nn/lr_scheduler.h) adjust them in place. Names appear only at the
/// checkpoint boundary (hyper_state). Each parameter's update is ONE fused pass over (param, grad, state): the checked ops sgd_step_ / adam_step_ (kernels/ops.h)
/// (per-element math in kernels/common/optim_math.h), with no allocation after the state exists.
/// Parameters whose grad is undefined are skipped (their state and step count do not advance).
///
/// Per-parameter state is created lazily at the first update, on the parameter's device, in the parameter's
/// dtype, except that f16/bf16 parameters keep fp32 state (the update is computed in fp32 either way); the
/// option fp32_state = false opts out and stores their state in the parameter's own half type (half the
/// optimizer memory, at the cost of rounding the moments every step). state_dict() names it `"state.<group>.<index>.<name>"` (e.g.
/// `"state.0.1.exp_avg"`) plus a 0-d i64 `"state.<group>.<index>.step"`, so it can be saved as safetensors;
/// hyper_state() carries the group hyperparameters as numbers (`"group.<g>.lr"`, `"group.<g>.<option>"`).
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/nn/module.h>

namespace volt::optim {

using nn::StateDict;

/// The hyperparameters of Volt's optimizers, one field each (torch.optim's param-group keys). In a group given
/// to an optimizer, unset fields take the optimizer's defaults; setting a field the optimizer does not use is an
/// error. The last four are scheduler bookkeeping (written by LRScheduler / OneCycleLR, saved with the groups).
struct GroupOptions {
  std::optional<double> momentum, dampening, weight_decay;  ///< SGD (weight_decay: Adam/AdamW too)
  std::optional<bool> nesterov;                             ///< SGD
  std::optional<double> beta1, beta2, eps;                  ///< Adam/AdamW
  std::optional<bool> amsgrad;                              ///< Adam/AdamW
  std::optional<double> alpha;                              ///< RMSprop (in [0, 1])
  std::optional<bool> centered;                             ///< RMSprop
  std::optional<double> lr_decay, initial_accumulator_value;  ///< Adagrad
  std::optional<double> initial_lr, max_lr, base_momentum, max_momentum;  ///< schedulers
};

/// Which optimizer option a field of GroupOptions is, for code that names options (checkpoint records, errors).
enum class GroupOption { momentum, dampening, weight_decay, nesterov, beta1, beta2, eps, amsgrad, alpha, centered,
                         lr_decay, initial_accumulator_value, initial_lr, max_lr, base_momentum, max_momentum };
const char* group_option_name(GroupOption o);
/// The option called `name`, or nullopt.
std::optional<GroupOption> parse_group_option(const std::string& name);
/// Reads/writes one field as a number (bools as 0/1); nullopt when unset.
std::optional<double> get_group_option(const GroupOptions& g, GroupOption o);
void set_group_option(GroupOptions& g, GroupOption o, double v);

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = std::numeric_limits<double>::quiet_NaN();  ///< NaN: the optimizer's default lr
  GroupOptions options;                                  ///< unset fields: the optimizer's defaults
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  /// Clears (set_to_none) or zeroes the gradients of every parameter in every group.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// Appends a group; its missing lr/options are filled from the defaults.
  void add_param_group(ParamGroup group);
  /// The default lr, and the default options (exactly the fields this optimizer uses are set).
  double default_lr() const { return default_lr_; }
  const GroupOptions& defaults() const { return defaults_; }

  /// Per-parameter state tensors and step counts (see the header comment). Tensors share storage with the
  /// optimizer's state; load_state_dict copies.
  virtual StateDict state_dict() const;
  /// Restores state saved by state_dict() of an optimizer of the same kind over parameters of the same shapes.
  /// Throws volt::Error for keys that name no parameter or state, and for mis-shaped tensors.
  virtual void load_state_dict(const StateDict& sd);
  /// Group hyperparameters (lr and options) as numbers, keyed `"group.<g>.lr"` / `"group.<g>.<option>"`, plus
  /// the step counts (`"state.<g>.<i>.step"`), for a JSON record next to the tensors.
  std::map<std::string, double> hyper_state() const;
  void load_hyper_state(const std::map<std::string, double>& hs);

  virtual std::string type_name() const = 0;
  /// Whether f16/bf16 parameters keep fp32 state (the default), and the dtype state of a `param` parameter has.
  bool fp32_state() const { return fp32_state_; }
  DType state_dtype(DType param) const;
  /// The names of the per-parameter state tensors this optimizer keeps (for its current options).
  virtual std::vector<std::string> state_names(const ParamGroup& group) const = 0;

  /// Step count of parameter `index` of group `group` (0 before its first update).
  int64_t step_count(size_t group, size_t index) const;

 protected:
  Optimizer(std::vector<ParamGroup> groups, double default_lr, GroupOptions defaults);

  struct ParamState {
    int64_t step = 0;
    std::vector<Tensor> buffers;  ///< parallel to state_names(group); undefined until the first update
  };
  /// The state of groups_[g].params[i], sized to the groups' current parameter lists.
  ParamState& state(size_t g, size_t i);
  /// Checks the parameter/grad pair for a fused update and returns the (contiguous) gradient, or an undefined
  /// tensor when the parameter has no gradient.
  Tensor usable_grad(const Tensor& param, size_t g, size_t i) const;
  /// Creates missing state buffers as zeros of the param's shape in the state dtype, on the param's device.
  void ensure_buffers(ParamState& st, const Tensor& param, size_t count);

  std::vector<ParamGroup> groups_;
  double default_lr_ = 0;
  GroupOptions defaults_;
  bool fp32_state_ = true;
  std::vector<std::vector<ParamState>> state_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool fp32_state = true;  ///< false: f16/bf16 parameters keep their momentum buffer in their own dtype
};

/// PyTorch's SGD: g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g at the first step);
/// g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});
  void step() override;
  std::string type_name() const override { return "SGD"; }
  std::vector<std::string> state_names(const ParamGroup& group) const override;
};

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool fp32_state = true;  ///< false: f16/bf16 parameters keep exp_avg/exp_avg_sq in their own dtype
  /// bf16 parameters: round each update stochastically (unbiased) instead of to nearest, so that updates smaller
  /// than half a bf16 step still move the parameters on average (what lets bf16-true train like fp32). Keyed
  /// by the default generator's seed when the optimizer is built, the parameter and the step: reproducible
  /// under seed_everything. No effect on other dtypes.
  bool stochastic_rounding = true;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool fp32_state = true;
  bool stochastic_rounding = true;  ///< as AdamOptions::stochastic_rounding
};

/// PyTorch's Adam (L2 weight decay added to the gradient) and, with decoupled weight decay, AdamW
/// (p *= 1 - lr * wd before the update). Options: beta1, beta2, eps, weight_decay, amsgrad (0/1).
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});
  void step() override;
  std::string type_name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  std::vector<std::string> state_names(const ParamGroup& group) const override;

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults, bool decoupled);
  bool decoupled_ = false;
  bool stochastic_rounding_ = true;
  uint64_t rounding_seed_ = 0;  ///< the default generator's seed at construction
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
};

}  // namespace volt::optim

namespace volt::nn {
using optim::Adam;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;
using optim::Optimizer;
using optim::GroupOptions;
using optim::ParamGroup;
using optim::SGD;
using optim::SGDOptions;
}  // namespace volt::nn
