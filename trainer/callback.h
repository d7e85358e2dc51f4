#pragma once
/// @file
/// Callbacks: self-contained additions to the training loop (checkpointing, early stopping, ...).
///
/// Hooks run on every rank, in registration order. A callback that makes a decision (stop, save) must make it
/// from values every rank agrees on: callback_metrics are global when logged with sync_dist, and the
/// Trainer's request_stop / save_checkpoint go through the Strategy so ranks agree.
///
/// "Monitoring" callbacks (is_monitoring() true: EarlyStopping, ModelCheckpoint) run their epoch-end hooks
/// after the module's own on_train_epoch_end, so they see what it logged.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <volt/kernels/tensor.h>
#include <volt/data/batch.h>
#include <volt/nn/optim.h>

namespace volt {

class Trainer;
class TrainModule;
using Batch = data::Batch;

class Callback {
 public:
  virtual ~Callback() = default;
  /// Key under which state_dict() is stored in checkpoints (unique per callback instance).
  virtual std::string state_key() const { return "Callback"; }
  virtual bool is_monitoring() const { return false; }
  /// False for callbacks that sit out a fast_dev_run (it saves nothing and never stops early): checkpointing
  /// and early stopping.
  virtual bool runs_in_fast_dev_run() const { return true; }
  /// True for a callback that writes checkpoints: the Trainer then adds no default ModelCheckpoint.
  virtual bool saves_checkpoints() const { return false; }

  virtual void on_fit_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_fit_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, TrainModule& module) {}
  virtual void on_train_epoch_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const Batch& batch,
                                  int64_t batch_idx) {}
  virtual void on_validation_start(Trainer& trainer, TrainModule& module) {}
  /// After a validation run's epoch metrics are in trainer.callback_metrics() (not during sanity checking).
  virtual void on_validation_end(Trainer& trainer, TrainModule& module) {}
  virtual void on_test_end(Trainer& trainer, TrainModule& module) {}
  /// fit is stopping because of SIGINT/SIGTERM (Trainer::interrupted()), instead of on_fit_end. The loop
  /// position is consistent: a checkpoint saved here resumes exactly. (every rank, like the other hooks)
  virtual void on_interrupt(Trainer& trainer, TrainModule& module) {}

  virtual nlohmann::json state_dict() const { return nlohmann::json::object(); }
  virtual void load_state_dict(const nlohmann::json& state) {}
};

}  // namespace volt
