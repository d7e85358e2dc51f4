#include <volt/trainer/precision/grad_scaler.h>

#include <cmath>

#include <volt/kernels/ops.h>

namespace volt {

GradScaler::GradScaler(GradScalerOptions options) : opt_(options), scale_(options.init_scale) {
  VOLT_CHECK(opt_.init_scale > 0, "GradScaler: init_scale=", opt_.init_scale, " must be > 0");
  VOLT_CHECK(opt_.growth_factor > 1, "GradScaler: growth_factor=", opt_.growth_factor, " must be > 1");
  VOLT_CHECK(opt_.backoff_factor > 0 && opt_.backoff_factor < 1, "GradScaler: backoff_factor=", opt_.backoff_factor,
             " must be in (0, 1)");
  VOLT_CHECK(opt_.growth_interval >= 1, "GradScaler: growth_interval=", opt_.growth_interval, " must be >= 1");
}

bool GradScaler::unscale_(optim::Optimizer& opt, Collectives& strategy) {
  if (unscaled_[&opt]) return found_inf_;
  unscaled_[&opt] = true;
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (auto& g : opt.param_groups())
    for (auto& p : g.params) grads.push_back(p.grad());
  // One fused pass per gradient (unscale + check) and a single read of the flag for the whole optimizer.
  Tensor flag = unscale_grads_(grads, 1.0 / scale_);
  const bool bad = flag.item() != 0.0;
  // Every rank takes the same decision (a rank whose gradients overflowed before the all-reduce, or under
  // no_sync, must not step alone).
  found_inf_ = strategy.reduce_decision(found_inf_ || bad, /*all=*/false);
  return found_inf_;
}

bool GradScaler::step(optim::Optimizer& opt, Collectives& strategy) {
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

GradScalerRecord GradScaler::state_dict() const { return {scale_, growth_tracker_, skipped_}; }

void GradScaler::load_state_dict(const GradScalerRecord& s) {
  VOLT_CHECK(std::isfinite(s.scale) && s.scale > 0, "GradScaler: loaded scale ", s.scale, " must be finite and > 0");
  VOLT_CHECK(s.growth_tracker >= 0 && s.skipped >= 0, "GradScaler: loaded growth_tracker ", s.growth_tracker,
             " and skipped ", s.skipped, " must be >= 0");
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  skipped_ = s.skipped;
  found_inf_ = false;
  unscaled_.clear();
}

}  // namespace volt
