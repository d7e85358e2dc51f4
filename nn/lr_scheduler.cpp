#include <volt/nn/lr_scheduler.h>

#include <cmath>
#include <numbers>

namespace volt::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (auto& g : opt_.param_groups()) {
    if (!g.options.initial_lr) g.options.initial_lr = g.lr;
    base_lrs_.push_back(*g.options.initial_lr);
  }
}

void LRScheduler::apply(int64_t epoch) {
  last_lrs_ = lrs_at(epoch);
  auto& groups = opt_.param_groups();
  VOLT_CHECK(groups.size() == last_lrs_.size(), type_name(), ": the optimizer has ", groups.size(),
             " parameter groups but the scheduler was built for ", last_lrs_.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = last_lrs_[g];
  apply_extra(epoch);
}

void LRScheduler::step() {
  ++last_epoch;
  apply(last_epoch);
}

std::map<std::string, double> LRScheduler::state_dict() const {
  std::map<std::string, double> s{{"last_epoch", static_cast<double>(last_epoch)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) s["base_lr." + std::to_string(g)] = base_lrs_[g];
  return s;
}

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  auto it = state.find("last_epoch");
  VOLT_CHECK(it != state.end(), type_name(), ".load_state_dict: missing key 'last_epoch'");
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    auto b = state.find("base_lr." + std::to_string(g));
    VOLT_CHECK(b != state.end(), type_name(), ".load_state_dict: missing key 'base_lr.", g, "'");
    base_lrs_[g] = b->second;
  }
  last_epoch = static_cast<int64_t>(it->second);
  if (last_epoch >= 0) apply(last_epoch);
}

// ---- StepLR / ExponentialLR / CosineAnnealingLR / LambdaLR ----------------------------------------------------

StepLR::StepLR(Optimizer& opt, int64_t step_size_, double gamma_) : LRScheduler(opt), step_size(step_size_), gamma(gamma_) {
  VOLT_CHECK(step_size_ > 0, "StepLR: step_size must be positive, got ", step_size_);
  step();
}

std::vector<double> StepLR::lrs_at(int64_t epoch) const {
  std::vector<double> out;
  for (double b : base_lrs_) out.push_back(b * std::pow(gamma, static_cast<double>(epoch / step_size)));
  return out;
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma_) : LRScheduler(opt), gamma(gamma_) { step(); }

std::vector<double> ExponentialLR::lrs_at(int64_t epoch) const {
  std::vector<double> out;
  for (double b : base_lrs_) out.push_back(b * std::pow(gamma, static_cast<double>(epoch)));
  return out;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min_)
    : LRScheduler(opt), T_max(t_max), eta_min(eta_min_) {
  VOLT_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
  step();
}

std::vector<double> CosineAnnealingLR::lrs_at(int64_t epoch) const {
  std::vector<double> out;
  const double c = (1.0 + std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(T_max))) / 2.0;
  for (double b : base_lrs_) out.push_back(eta_min + (b - eta_min) * c);
  return out;
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> factor) : LRScheduler(opt), factor_(std::move(factor)) {
  VOLT_CHECK(factor_ != nullptr, "LambdaLR: the factor function is empty");
  step();
}

std::vector<double> LambdaLR::lrs_at(int64_t epoch) const {
  std::vector<double> out;
  const double f = factor_(epoch);
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

// ---- OneCycleLR -----------------------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total, double pct_start, AnnealStrategy anneal,
                       double div_factor, double final_div_factor)
    : OneCycleLR(opt, max_lr, total,
                 OneCycleOptions{pct_start, anneal, div_factor, final_div_factor, false, true, 0.85, 0.95}) {}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total, OneCycleOptions o)
    : LRScheduler(opt), total_steps(total), options(o) {
  VOLT_CHECK(total > 0, "OneCycleLR: total_steps must be positive, got ", total);
  VOLT_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start);
  VOLT_CHECK(max_lr > 0 && o.div_factor > 0 && o.final_div_factor > 0,
             "OneCycleLR: max_lr, div_factor and final_div_factor must be positive, got ", max_lr, ", ", o.div_factor,
             ", ", o.final_div_factor);
  const double init = 1.0 / o.div_factor, fin = init / o.final_div_factor;  // factors of max_lr
  const double up = o.pct_start * static_cast<double>(total);
  if (o.three_phase) {
    phases_ = {{up - 1, init, 1.0, o.max_momentum, o.base_momentum},
               {2 * up - 2, 1.0, init, o.base_momentum, o.max_momentum},
               {static_cast<double>(total) - 1, init, fin, o.max_momentum, o.max_momentum}};
  } else {
    phases_ = {{up - 1, init, 1.0, o.max_momentum, o.base_momentum},
               {static_cast<double>(total) - 1, 1.0, fin, o.base_momentum, o.max_momentum}};
  }
  auto& groups = opt_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    max_lrs_.push_back(max_lr);
    groups[g].options.initial_lr = max_lr * init;
    groups[g].options.max_lr = max_lr;
    base_lrs_[g] = max_lr * init;
  }
  if (o.cycle_momentum) {
    const GroupOptions& d = opt_.defaults();
    if (d.momentum) momentum_field_ = &GroupOptions::momentum;
    else if (d.beta1) momentum_field_ = &GroupOptions::beta1;
    VOLT_CHECK(momentum_field_ != nullptr, "OneCycleLR: cycle_momentum is on but ", opt_.type_name(),
               " has neither a momentum nor a beta1 option; pass cycle_momentum = false");
    for (auto& g : groups) {
      g.options.max_momentum = o.max_momentum;
      g.options.base_momentum = o.base_momentum;
    }
  }
  step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options.anneal_strategy == AnnealStrategy::Linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t epoch) const {
  VOLT_CHECK(epoch <= total_steps, "OneCycleLR: tried to step ", epoch, " times but total_steps is ", total_steps);
  const double e = static_cast<double>(epoch);
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (e <= p.end_step || i + 1 == phases_.size()) return {&p, (e - start) / (p.end_step - start)};
    start = p.end_step;
  }
  VOLT_ASSERT(false, "unreachable");
  return {nullptr, 0.0};
}

std::vector<double> OneCycleLR::lrs_at(int64_t epoch) const {
  auto [p, pct] = locate(epoch);
  const double f = anneal(p->start_lr_factor, p->end_lr_factor, pct);
  std::vector<double> out;
  for (double m : max_lrs_) out.push_back(m * f);
  return out;
}

double OneCycleLR::momentum_at(int64_t epoch) const {
  auto [p, pct] = locate(epoch);
  return anneal(p->start_momentum, p->end_momentum, pct);
}

void OneCycleLR::apply_extra(int64_t epoch) {
  if (momentum_field_ == nullptr) return;
  const double m = momentum_at(epoch);
  for (auto& g : opt_.param_groups()) g.options.*momentum_field_ = m;
}

std::map<std::string, double> OneCycleLR::state_dict() const {
  auto s = LRScheduler::state_dict();
  s["total_steps"] = static_cast<double>(total_steps);
  return s;
}

// ---- LinearWarmupLR -------------------------------------------------------------------------------------------

LinearWarmupLR::LinearWarmupLR(Optimizer& opt, int64_t warmup, std::shared_ptr<LRScheduler> after)
    : LRScheduler(opt), warmup_steps(warmup), after_(std::move(after)) {
  VOLT_CHECK(warmup >= 0, "LinearWarmupLR: warmup_steps must be >= 0, got ", warmup);
  if (after_) base_lrs_ = after_->base_lrs();  // e.g. OneCycleLR redefines the base lrs
  step();
}

std::vector<double> LinearWarmupLR::lrs_at(int64_t epoch) const {
  if (epoch >= warmup_steps) {
    if (after_) return after_->lrs_at(epoch - warmup_steps);
    return base_lrs_;
  }
  std::vector<double> out;
  const double f = static_cast<double>(epoch + 1) / static_cast<double>(warmup_steps + 1);
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void LinearWarmupLR::apply_extra(int64_t epoch) {
  if (after_ && epoch >= warmup_steps) {
    after_->last_epoch = epoch - warmup_steps;
    after_->apply_extra(epoch - warmup_steps);
  }
}

std::map<std::string, double> LinearWarmupLR::state_dict() const {
  auto s = LRScheduler::state_dict();
  if (after_)
    for (const auto& [k, v] : after_->state_dict()) s["after." + k] = v;
  return s;
}

void LinearWarmupLR::load_state_dict(const std::map<std::string, double>& state) {
  if (after_) {
    std::map<std::string, double> inner;
    for (const auto& [k, v] : state)
      if (k.rfind("after.", 0) == 0) inner[k.substr(6)] = v;
    if (!inner.empty()) {
      // Restore the wrapped scheduler's bases without letting it write lrs; ours follow.
      int64_t e = static_cast<int64_t>(inner.at("last_epoch"));
      inner["last_epoch"] = -1;
      after_->load_state_dict(inner);
      after_->last_epoch = e;
    }
  }
  LRScheduler::load_state_dict(state);
}

}  // namespace volt::optim
