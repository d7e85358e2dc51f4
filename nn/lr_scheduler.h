#pragma once
/// @file
/// Learning-rate schedulers (torch.optim.lr_scheduler), epoch- or step-based: the caller decides what one
/// step() means. Each scheduler computes lr in closed form from last_epoch and the groups' base lrs
/// (group option "initial_lr", set from the group's lr by the first scheduler attached), and writes it into
/// the optimizer's groups. Construction performs the first step() (last_epoch -1 -> 0), as in PyTorch.
///
/// The optimizer must outlive the scheduler (it is held by reference).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <volt/nn/optim.h>

namespace volt::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  /// Advances last_epoch by one and sets each group's lr to lrs_at(last_epoch).
  virtual void step();
  double get_last_lr() const { return last_lrs_.at(0); }  // group 0
  const std::vector<double>& get_last_lrs() const { return last_lrs_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// lr of every group at `epoch` (>= 0), without side effects.
  virtual std::vector<double> lrs_at(int64_t epoch) const = 0;
  virtual std::string type_name() const = 0;

  /// `{"last_epoch", "base_lr.<g>"}` (+ scheduler-specific entries). load_state_dict restores them and re-applies
  /// the lrs of last_epoch to the optimizer.
  virtual std::map<std::string, double> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, double>& state);

  /// Called by step() after the lrs are written, for schedulers that also set other options (momentum).
  virtual void apply_extra(int64_t epoch) {}

  int64_t last_epoch = -1;

 protected:
  explicit LRScheduler(Optimizer& opt);
  void apply(int64_t epoch);

  Optimizer& opt_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
};

/// lr = base * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  std::vector<double> lrs_at(int64_t epoch) const override;
  std::string type_name() const override { return "StepLR"; }
  int64_t step_size;
  double gamma;
};

/// lr = base * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  std::vector<double> lrs_at(int64_t epoch) const override;
  std::string type_name() const override { return "ExponentialLR"; }
  double gamma;
};

/// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (PyTorch's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  std::vector<double> lrs_at(int64_t epoch) const override;
  std::string type_name() const override { return "CosineAnnealingLR"; }
  int64_t T_max;
  double eta_min;
};

/// lr = base * factor(epoch) for a user function.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> factor);
  std::vector<double> lrs_at(int64_t epoch) const override;
  std::string type_name() const override { return "LambdaLR"; }

 private:
  std::function<double(int64_t)> factor_;
};

enum class AnnealStrategy { Cos, Linear };

struct OneCycleOptions {
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  /// Cycles momentum (SGD "momentum", Adam "beta1") inversely to the lr, between these bounds.
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

/// PyTorch's OneCycleLR: from max_lr/div_factor up to max_lr over pct_start of total_steps, then down to
/// max_lr/(div_factor*final_div_factor). Stepping past total_steps throws.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start,
             AnnealStrategy anneal = AnnealStrategy::Cos, double div_factor = 25.0, double final_div_factor = 1e4);
  std::vector<double> lrs_at(int64_t epoch) const override;
  /// Momentum (or beta1) at `epoch` for group g; only meaningful with cycle_momentum.
  double momentum_at(int64_t epoch) const;
  std::string type_name() const override { return "OneCycleLR"; }
  std::map<std::string, double> state_dict() const override;
  void apply_extra(int64_t epoch) override;

  int64_t total_steps;
  OneCycleOptions options;

 private:
  struct Phase {
    double end_step;
    double start_lr_factor, end_lr_factor;  ///< in units of max_lr
    double start_momentum, end_momentum;
  };
  /// Which phase `epoch` is in and the fraction of it done.
  std::pair<const Phase*, double> locate(int64_t epoch) const;
  double anneal(double start, double end, double pct) const;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_;
  std::optional<double> GroupOptions::*momentum_field_ = nullptr;  ///< momentum (SGD) or beta1 (Adam); null: off
};

/// Linear warmup: for epoch e < warmup_steps, lr = base * (e + 1) / (warmup_steps + 1); from e = warmup_steps
/// on, the wrapped scheduler's lr at e - warmup_steps (its closed form; it is not stepped), or base when none.
/// The wrapped scheduler must be built on the same optimizer before this one.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& opt, int64_t warmup_steps, std::shared_ptr<LRScheduler> after = nullptr);
  std::vector<double> lrs_at(int64_t epoch) const override;
  std::string type_name() const override { return "LinearWarmupLR"; }
  void apply_extra(int64_t epoch) override;
  std::map<std::string, double> state_dict() const override;
  void load_state_dict(const std::map<std::string, double>& state) override;
  int64_t warmup_steps;

 private:
  std::shared_ptr<LRScheduler> after_;
};

}  // namespace volt::optim

namespace volt::nn {
using optim::AnnealStrategy;
using optim::CosineAnnealingLR;
using optim::ExponentialLR;
using optim::LambdaLR;
using optim::LinearWarmupLR;
using optim::LRScheduler;
using optim::OneCycleLR;
using optim::OneCycleOptions;
using optim::StepLR;
}  // namespace volt::nn
