#pragma once
/// @file
/// GradScaler: dynamic loss scaling for "16-mixed" precision (the rules of torch.cuda.amp.GradScaler).
///
/// @code
///   loss' = loss * scale                       before backward (fp16 gradients stay representable)
///   unscale_(opt): grads /= scale, and checks them for inf/NaN in the same pass (one fused kernel per
///             gradient, one host read of the flag per optimizer; all ranks agree through Collectives)
///   step(opt): skips optimizer.step() when non-finite gradients were found
///   update(): found inf -> scale *= backoff_factor (0.5) and the clean-step count restarts;
///             else after growth_interval (2000) clean steps in a row -> scale *= growth_factor (2)
/// @endcode
/// Initial scale 2^16. Clipping must happen between unscale_ and step (on true gradient values); the Trainer
/// does this for precision="16-mixed" (trainer/loops/training_step.cpp).
#include <cstdint>
#include <map>

#include <volt/nn/optim.h>
#include <volt/trainer/checkpoint/record.h>
#include <volt/trainer/precision/precision.h>
#include <volt/trainer/collectives.h>

namespace volt {

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  double scale() const { return scale_; }
  Tensor scale_loss(const Tensor& loss) const { return loss * scale_; }
  /// Divides every gradient of `opt` by the scale (once per step) and records whether any is inf/NaN.
  /// Returns whether non-finite gradients were found (on any rank).
  bool unscale_(optim::Optimizer& opt, Collectives& strategy);
  /// Unscales if needed, then steps unless non-finite gradients were found. Returns whether it stepped.
  bool step(optim::Optimizer& opt, Collectives& strategy);
  /// Whether this iteration's gradients (of the optimizers unscaled so far) held inf/NaN.
  bool found_inf() const { return found_inf_; }
  /// Adjusts the scale for the next iteration (call once per iteration, after all optimizers stepped).
  void update();
  int64_t skipped_steps() const { return skipped_; }

  /// The state a checkpoint carries (scale, clean-step count, skipped steps); load validates it.
  GradScalerRecord state_dict() const;
  void load_state_dict(const GradScalerRecord& s);

 private:
  GradScalerOptions opt_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  bool found_inf_ = false;
  std::map<const optim::Optimizer*, bool> unscaled_;  ///< per optimizer, this iteration
};

}  // namespace volt
