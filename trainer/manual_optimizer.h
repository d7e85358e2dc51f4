#pragma once
/// @file
/// Manual optimisation: a TrainModule that sets `automatic_optimization = false` drives its optimizers itself
/// in training_step (GANs, several optimizers per batch, custom accumulation):
///
/// @code
///   Tensor training_step(const Batch& b, int64_t i) override {
///     auto opts = optimizers();                      // one ManualOptimizer per configured optimizer
///     bool sync = (i + 1) % 2 == 0 || trainer()->is_last_batch();
///     {
///       auto t = opts[0].toggle_model(/*sync_grad=*/sync);  // only opts[0]'s params train; no DDP sync if !sync
///       manual_backward(loss_d(b));
///       if (sync) { opts[0].step(); opts[0].zero_grad(); }
///     }
///     ...
///     return Tensor();                               // nothing for the Trainer to backpropagate
///   }
/// @endcode
///
/// The Trainer then does no backward, step or zero_grad of its own; every ManualOptimizer::step() counts one
/// global step. LR schedulers are not stepped automatically (step them in the module).
#include <memory>

#include <volt/nn/optim.h>
#include <volt/kernels/tensor.h>

namespace volt {

class Trainer;
class TrainModule;

class ManualOptimizer {
 public:
  ManualOptimizer(Trainer& trainer, TrainModule& module, std::shared_ptr<optim::Optimizer> optimizer, int index)
      : trainer_(&trainer), module_(&module), opt_(std::move(optimizer)), index_(index) {}

  /// Waits for in-flight gradient synchronisation (DDP), runs the module's on_before_optimizer_step hook, steps
  /// the optimizer and counts a global step.
  void step();
  void zero_grad(bool set_to_none = true);
  optim::Optimizer& optimizer() { return *opt_; }
  int index() const { return index_; }

  /// RAII scope: only this optimizer's parameters require grad (the module's others are frozen, as
  /// toggle_optimizer does), and with sync_grad=false backward passes inside it do no gradient
  /// synchronisation across ranks (their gradients accumulate locally until a synced backward).
  class Toggle {
   public:
    Toggle(ManualOptimizer& o, bool sync_grad);
    ~Toggle();
    Toggle(const Toggle&) = delete;
    Toggle& operator=(const Toggle&) = delete;
    Toggle(Toggle&& other) noexcept;

   private:
    ManualOptimizer* o_;
    bool prev_sync_;
  };
  [[nodiscard]] Toggle toggle_model(bool sync_grad = true) { return Toggle(*this, sync_grad); }

 private:
  Trainer* trainer_;
  TrainModule* module_;
  std::shared_ptr<optim::Optimizer> opt_;
  int index_;
};

}  // namespace volt
