#pragma once
/// @file
/// ModelCheckpoint: saves Trainer checkpoints (trainer/connectors/checkpoint_connector.cpp format: `<stem>.safetensors` +
/// `<stem>.json`) after validation runs, or at train epoch end when the fit has no validation loop.
///
///  - filename: a template; "{epoch}" and "{step}" become the epoch index and global_step, "{name}" or
///    "{name:.4f}" a logged metric's value. Default "epoch={epoch}-step={step}". A name already used by a
///    different save gets "-v1", "-v2", ...
///  - monitor empty: every save is "the latest"; save_top_k = 1 keeps only the newest, -1 keeps all.
///  - monitor set: keeps the save_top_k best by `mode` ("min"/"max"); -1 keeps all, 0 saves none.
///  - save_last: also writes "last" (overwritten each time).
///  - every_n_epochs: only on epochs where (epoch + 1) % every_n_epochs == 0; 0 never at epoch/validation end.
///    -1 (default): 1, or 0 when a step or time trigger is set.
///  - every_n_train_steps: also save after every N-th optimizer step, mid-epoch; the checkpoint records the
///    loop position, so a resume continues with the next batch. A trigger on an epoch's last batch is moved to
///    that epoch's end (after the epoch schedulers and validation), so the saved state is the finished epoch.
///  - train_time_interval: also save after the first optimizer step at which this many seconds have passed
///    since the last save (or the fit start); every rank agrees on the decision (one small collective per
///    stepping batch).
///  - on an interrupted fit (SIGINT/SIGTERM, see Trainer), writes "interrupted" in its directory, unless a
///    callback writes that stop's checkpoint itself (trainer/callbacks/interrupt_checkpoint.h: Preemption).
/// Every rank runs the same decision (monitored values are broadcast from rank 0); rank 0 writes and deletes.
///
/// A restored state (load_state_dict) is untrusted input: every path in it must lie inside its "dirpath"
/// (a volt::Error naming the key otherwise, also when "dirpath" is empty or missing while paths are named); at
/// fit start the paths must resolve, links followed, inside this run's directory, and a state recorded for
/// another directory keeps only best_model_path. A displaced checkpoint is deleted only when it is a complete
/// pair of Volt checkpoint files inside this run's directory (docs/reliability.md).
#include <chrono>
#include <map>
#include <string>

#include <volt/trainer/callback.h>

namespace volt {

struct ModelCheckpointOptions {
  std::string dirpath;  ///< empty: `<trainer.log_dir()>/checkpoints`
  std::string filename = "epoch={epoch}-step={step}";
  std::string monitor;
  std::string mode = "min";
  int64_t save_top_k = 1;
  bool save_last = false;
  int64_t every_n_epochs = -1;
  int64_t every_n_train_steps = 0;  ///< 0: off
  double train_time_interval = 0;   ///< seconds; 0: off
};

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});
  std::string state_key() const override;
  bool runs_in_fast_dev_run() const override { return false; }
  bool saves_checkpoints() const override { return true; }
  bool is_monitoring() const override { return true; }
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_interrupt(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// Stems (paths without extension) of the kept checkpoints and their scores (NaN without monitor).
  const std::map<std::string, double>& best_k_models() const { return best_k_; }
  const std::string& best_model_path() const { return best_path_; }
  double best_model_score() const { return best_score_; }
  const std::string& last_model_path() const { return last_path_; }
  const std::string& dirpath() const { return dir_; }
  const ModelCheckpointOptions& options() const { return opt_; }

  /// The filename for the given values (exposed for tests).
  static std::string format_name(const std::string& tmpl, int64_t epoch, int64_t step,
                                 const std::map<std::string, double>& metrics);

 private:
  bool epoch_due(const Trainer& trainer) const;
  /// Saves the top-k/latest file and "last" as configured (once per global step). (collective)
  void save(Trainer& trainer);
  /// The checkpoint directory, fixed (and agreed across ranks) on first use.
  const std::string& resolve_dir(Trainer& trainer);
  void remove_checkpoint(Trainer& trainer, const std::string& stem);
  bool better(double a, double b) const { return opt_.mode == "min" ? a < b : a > b; }
  std::string worst_key() const;

  ModelCheckpointOptions opt_;
  std::string dir_;
  std::string loaded_dir_;  ///< dirpath of a restored state
  bool restored_ = false;   ///< a state was loaded and its paths are not yet checked against dir_
  std::map<std::string, double> best_k_;
  std::string best_path_;
  double best_score_;
  std::string last_path_;
  std::string latest_path_;  ///< newest top-k save (no monitor)
  int64_t last_saved_step_ = -1;
  int64_t every_n_epochs_ = 1;        ///< opt_.every_n_epochs with -1 resolved
  bool step_save_at_epoch_end_ = false;  ///< a step/time trigger fell on the epoch's last batch
  std::chrono::steady_clock::time_point last_time_save_;
};

}  // namespace volt
