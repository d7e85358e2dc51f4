#include <volt/trainer/manual_optimizer.h>

#include <volt/trainer/train_module.h>
#include <volt/trainer/trainer.h>

namespace volt {

void ManualOptimizer::step() { trainer_->manual_optimizer_step(*opt_, index_); }

void ManualOptimizer::zero_grad(bool set_to_none) { opt_->zero_grad(set_to_none); }

ManualOptimizer::Toggle::Toggle(ManualOptimizer& o, bool sync_grad) : o_(&o), prev_sync_(o.trainer_->manual_sync_grad()) {
  o.module_->toggle_optimizer(*o.opt_);
  o.trainer_->set_manual_sync_grad(sync_grad);
}

ManualOptimizer::Toggle::Toggle(Toggle&& other) noexcept : o_(other.o_), prev_sync_(other.prev_sync_) {
  other.o_ = nullptr;
}

ManualOptimizer::Toggle::~Toggle() {
  if (!o_) return;
  o_->trainer_->set_manual_sync_grad(prev_sync_);
  o_->module_->untoggle_optimizer();
}

std::vector<ManualOptimizer> TrainModule::optimizers() {
  VOLT_CHECK(trainer_ != nullptr, type_name(), "::optimizers(): the module is not attached to a Trainer (call it "
             "from training_step during fit)");
  std::vector<ManualOptimizer> out;
  auto& opts = trainer_->optimizers();
  for (size_t i = 0; i < opts.size(); ++i) out.emplace_back(*trainer_, *this, opts[i], static_cast<int>(i));
  return out;
}

void TrainModule::manual_backward(const Tensor& loss) {
  VOLT_CHECK(trainer_ != nullptr, type_name(), "::manual_backward: the module is not attached to a Trainer");
  trainer_->manual_backward(loss);
}

}  // namespace volt
