#pragma once
// GradScaler: dynamic loss scaling for "16-mixed" precision (the rules of torch.cuda.amp.GradScaler).
//
//   loss' = loss * scale                       before backward (fp16 gradients stay representable)
//   unscale_(opt): grads /= scale, and checks them for inf/NaN (all ranks agree through the Strategy)
//   step(opt): skips optimizer.step() when non-finite gradients were found
//   update(): found inf -> scale *= backoff_factor (0.5) and the clean-step count restarts;
//             else after growth_interval (2000) clean steps in a row -> scale *= growth_factor (2)
// Initial scale 2^16. Clipping must happen between unscale_ and step (on true gradient values).
// The Trainer does not enable this yet: "16-mixed" also needs autocast in the op layer (see trainer.cpp).
#include <cstdint>
#include <map>

#include <nlohmann/json.hpp>

#include "nn/optim.h"
#include "trainer/strategy.h"

namespace volt {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  double scale() const { return scale_; }
  Tensor scale_loss(const Tensor& loss) const { return loss * scale_; }
  // Divides every gradient of `opt` by the scale (once per step) and records whether any is inf/NaN.
  // (collective through strategy.reduce_decision: one host sync per step)
  bool unscale_(optim::Optimizer& opt, Strategy& strategy);
  // Unscales if needed, then steps unless non-finite gradients were found. Returns whether it stepped.
  bool step(optim::Optimizer& opt, Strategy& strategy);
  // Adjusts the scale for the next iteration (call once per iteration, after all optimizers stepped).
  void update();
  int64_t skipped_steps() const { return skipped_; }

  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& s);

 private:
  GradScalerOptions opt_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  bool found_inf_ = false;
  std::map<const optim::Optimizer*, bool> unscaled_;  // per optimizer, this iteration
};

}  // namespace volt
