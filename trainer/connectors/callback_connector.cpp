// Trainer::setup_callbacks: the callbacks a run uses. The user's, less those that sit out a fast_dev_run
// (Callback::runs_in_fast_dev_run), plus a default ModelCheckpoint when checkpointing is enabled and no callback
// saves checkpoints (Callback::saves_checkpoints), as upstream's callback connector does.
#include <iostream>
#include <memory>

#include <volt/runtime/log.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

namespace volt {

void Trainer::setup_callbacks() {
  callbacks_ = opt_.callbacks;
  if (opt_.fast_dev_run > 0) {
    // fast_dev_run saves nothing and never stops early: checkpointing and early stopping callbacks sit out.
    std::erase_if(callbacks_, [](const std::shared_ptr<Callback>& c) {
      return !c->runs_in_fast_dev_run();
    });
    if (strategy_->is_global_zero())
      std::cout << "Trainer: fast_dev_run=" << opt_.fast_dev_run << ": " << opt_.fast_dev_run
                << " batch(es) of training, validation, test and predict; logging and checkpointing are off\n";
  } else if (opt_.max_epochs == -1 && opt_.max_steps == -1 && strategy_->is_global_zero()) {
    logging::warn("Trainer: neither max_epochs nor max_steps is set; training stops after 1000 epochs (set "
                  "max_epochs or max_steps)");
  }
  bool has_ckpt = false;
  for (auto& c : callbacks_) has_ckpt |= c->saves_checkpoints();
  if (opt_.enable_checkpointing && !has_ckpt) callbacks_.push_back(std::make_shared<ModelCheckpoint>());
}

}  // namespace volt
