#include "trainer/grad_scaler.h"

#include <cmath>

#include "kernels/ops.h"

namespace volt {

GradScaler::GradScaler(GradScalerOptions options) : opt_(options), scale_(options.init_scale) {
  VOLT_CHECK(opt_.init_scale > 0, "GradScaler: init_scale=", opt_.init_scale, " must be > 0");
  VOLT_CHECK(opt_.growth_factor > 1, "GradScaler: growth_factor=", opt_.growth_factor, " must be > 1");
  VOLT_CHECK(opt_.backoff_factor > 0 && opt_.backoff_factor < 1, "GradScaler: backoff_factor=", opt_.backoff_factor,
             " must be in (0, 1)");
  VOLT_CHECK(opt_.growth_interval >= 1, "GradScaler: growth_interval=", opt_.growth_interval, " must be >= 1");
}

bool GradScaler::unscale_(optim::Optimizer& opt, Strategy& strategy) {
  if (unscaled_[&opt]) return found_inf_;
  unscaled_[&opt] = true;
  NoGradGuard ng;
  double inv = 1.0 / scale_;
  // g * 0 is NaN exactly where g is inf/NaN, so one sum per gradient (kept on the device) flags them all.
  Tensor flag;
  for (auto& g : opt.param_groups()) {
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      mul_(grad, inv);
      Tensor probe = cast((grad * 0.0).sum(), DType::f64);
      flag = flag.defined() ? flag + probe : probe;
    }
  }
  bool bad = flag.defined() && !std::isfinite(flag.item());
  found_inf_ = strategy.reduce_decision(found_inf_ || bad, /*all=*/false);
  return found_inf_;
}

bool GradScaler::step(optim::Optimizer& opt, Strategy& strategy) {
  if (!unscale_(opt, strategy)) {
    opt.step();
    return true;
  }
  ++skipped_;
  return false;
}

void GradScaler::update() {
  if (found_inf_) {
    scale_ *= opt_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= opt_.growth_interval) {
    scale_ *= opt_.growth_factor;
    growth_tracker_ = 0;
  }
  found_inf_ = false;
  unscaled_.clear();
}

nlohmann::json GradScaler::state_dict() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped", skipped_}};
}

void GradScaler::load_state_dict(const nlohmann::json& s) {
  scale_ = s.at("scale").get<double>();
  growth_tracker_ = s.at("growth_tracker").get<int64_t>();
  skipped_ = s.value("skipped", int64_t{0});
}

}  // namespace volt
