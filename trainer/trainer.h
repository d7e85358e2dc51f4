#pragma once
/// @file
/// Trainer: runs fit / validate / test / predict for a TrainModule (the Lightning Trainer contract, see
/// docs/trainer_contract.md).
///
/// fit():
/// @code{.unparsed}
///   setup (strategy places the module, optimizers from configure_optimizers, callbacks, logger, resume from
///   ckpt_path) -> sanity validation (num_sanity_val_steps batches, results discarded) -> epochs until
///   max_epochs / max_steps / max_time / an agreed stop request (but never before min_epochs and min_steps).
/// @endcode
/// A training batch: on_train_batch_start -> training_step -> loss / accumulate_grad_batches ->
///   on_before_backward -> backward (gradient sync skipped on non-stepping batches) -> on_after_backward ->
///   [stepping batch: every N batches and the epoch's last] per optimizer: on_before_optimizer_step, gradient
///   clipping (norm or value), step, on_before_zero_grad, zero_grad; global_step += 1; "step" schedulers ->
///   on_train_batch_end -> maybe validation (val_check_interval).
/// Epoch end: "epoch" schedulers -> validation (check_val_every_n_epoch) -> on_train_epoch_end (callbacks, then
///   the module) -> the epoch's training metrics computed and logged -> monitoring callbacks' on_train_epoch_end
///   (ModelCheckpoint, EarlyStopping see those metrics).
///
/// Logged "step" column: during fit, the index of the latest optimizer step (global_step - 1, at least 0); for
/// validate/test run on their own (a test after fit), global_step, as upstream. Step rows are written when
/// global_step % log_every_n_steps == 0 after a stepping batch.
///
/// Checkpoints (trainer/checkpoint/record.h): `<stem>.safetensors` (module state + `"optimizer.<i>.<key>"`) and
/// `<stem>.json` (trainer state, with the size and CRC-32 of the safetensors file), written atomically in that
/// order; fit(..., ckpt_path) verifies and restores both so that training continues exactly where it stopped,
/// mid-epoch included. ckpt_path may be a stem (or either file), "last" (the newest complete checkpoint in
/// the ModelCheckpoint dirpaths, `<default_root_dir>/checkpoints` and `<default_root_dir>/lightning_logs/`
/// version_*/checkpoints) or "best" (the monitoring ModelCheckpoint's best_model_path, from this trainer or the
/// newest checkpoint's record).
///
/// Interruption: during fit, the first SIGINT/SIGTERM stops training after the current batch (all ranks agree
/// at a step boundary; under DDP they ask every 8 optimizer steps mid-epoch, one small collective), calls Callback::on_interrupt (a
/// ModelCheckpoint writes "interrupted" in its directory), finalizes the loggers with RunStatus::interrupted and
/// returns from fit with interrupted() true. A second signal kills the process at once. The previous handlers are
/// restored after.
///
/// Loggers (trainer/loggers/logger.h): TrainerOptions::loggers, or one CSVLogger under default_root_dir when that list is
/// empty and TrainerOptions::logger is true. Rank 0 logs; every fit/validate/test/predict finalizes them (failed
/// when an exception leaves it).
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/data/data_loader.h>
#include <volt/data/data_module.h>
#include <volt/runtime/autocast.h>
#include <volt/trainer/callback.h>
#include <volt/trainer/precision/grad_scaler.h>
#include <volt/trainer/precision/precision.h>
#include <volt/trainer/profilers/profiler.h>
#include <volt/trainer/loggers/csv_logger.h>
#include <volt/trainer/loggers/logger.h>
#include <volt/trainer/result_collection.h>
#include <volt/trainer/step_graph.h>
#include <volt/trainer/strategies/strategy.h>
#include <volt/trainer/train_module.h>
#include <volt/trainer/trainer_options.h>

namespace volt {

class ProgressBar;
namespace nn {
class BatchNormBase;
}

/// Seeds the global Philox generator and remembers the seed for the loaders the Trainer prepares (shuffling
/// training loaders without an explicit sampler get RandomSampler(n, seed)).
void seed_everything(uint64_t seed);
/// The seed last given to seed_everything, or -1.
int64_t global_seed();

using MetricMap = std::map<std::string, double>;

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void fit(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path = "");
  void fit(TrainModule& module, std::shared_ptr<data::DataLoader> train,
           std::shared_ptr<data::DataLoader> val = nullptr, const std::string& ckpt_path = "");
  /// One metric map (the epoch values logged during the run) per loader; prints a results table on rank 0.
  std::vector<MetricMap> validate(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                  const std::string& ckpt_path = "");
  std::vector<MetricMap> validate(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path = "");
  std::vector<MetricMap> test(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                              const std::string& ckpt_path = "");
  std::vector<MetricMap> test(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path = "");
  /// predict_step outputs, one per batch, in order.
  std::vector<Tensor> predict(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                              const std::string& ckpt_path = "");
  std::vector<Tensor> predict(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path = "");

  // ---- state ---------------------------------------------------------------------------------------------
  const TrainerOptions& options() const { return opt_; }
  Strategy& strategy() { return *strategy_; }
  /// The ranks this run spans and their collectives (the strategy's communication half): what callbacks and
  /// modules need to agree on a value, reduce or gather. One process: every call is the identity.
  Collectives& collectives() { return *strategy_; }
  /// Where this process is in the job (upstream's properties of the same names): world_size processes over
  /// num_nodes machines; node_rank = global_rank / devices per node; local_rank is the launcher's rank of this
  /// process on its host (= global_rank % devices when ranks are placed node by node; trainer/strategies/node_layout.h).
  int num_nodes() const { return strategy_->num_nodes(); }
  int node_rank() const { return strategy_->node_rank(); }
  int local_rank() const { return strategy_->local_rank(); }
  int global_rank() const { return strategy_->global_rank(); }
  int world_size() const { return strategy_->world_size(); }
  /// Samples per optimizer step over all processes for a loader batch of `batch_size`:
  /// batch_size x accumulate_grad_batches x world_size.
  int64_t effective_batch_size(int64_t batch_size) const;
  int64_t current_epoch() const { return epoch_; }
  int64_t global_step() const { return global_step_; }
  bool sanity_checking() const { return sanity_checking_; }
  bool training() const { return stage_ == Stage::train; }
  /// What runs now (Stage::none between runs); name(stage()) is its spelling ("train", "validate", ...).
  Stage stage() const { return stage_; }
  int64_t num_training_batches() const { return num_train_batches_; }
  /// The optimizer steps fit takes at most (for schedulers such as OneCycleLR, from configure_optimizers on):
  /// max_epochs epochs of this rank's training batches (its shard of the loader over world_size() processes, after
  /// limit_train_batches, ceil-divided by
  /// accumulate_grad_batches), capped by max_steps; max_steps alone when only it limits the run. Throws
  /// outside fit.
  int64_t estimated_stepping_batches() const;
  bool is_last_batch() const { return is_last_batch_; }
  /// Set by callbacks or the module to end fit; acted on once all ranks agree (one process: after the current
  /// batch) and min_epochs/min_steps allow.
  void request_stop() { should_stop_ = true; }
  bool should_stop() const { return should_stop_; }
  /// The last fit stopped early on SIGINT/SIGTERM; interrupt_signal() says which (0 when it was not).
  bool interrupted() const { return interrupt_signal_ != 0; }
  int interrupt_signal() const { return interrupt_signal_; }
  /// Latest values: step values of the running batch and epoch values of finished epochs/validation runs.
  MetricMap callback_metrics() const;
  /// What went to the logger last (including "epoch"), and what the progress bar shows.
  const MetricMap& logged_metrics() const { return logged_metrics_; }
  MetricMap progress_bar_metrics() const { return last_pbar_; }
  std::vector<std::shared_ptr<optim::Optimizer>>& optimizers() { return optimizers_; }
  /// The captured training step of the current or last fit (TrainerOptions::cuda_graphs): captures, replays, and
  /// why graphs are off.
  const StepGraph& step_graph() const { return step_graph_; }
  std::vector<SchedulerConfig>& lr_schedulers() { return schedulers_; }
  std::vector<std::shared_ptr<Callback>>& callbacks() { return callbacks_; }
  /// The loggers in use (set up at the first fit/validate/test/predict; empty on ranks other than 0 and with
  /// logger=false), and the first of them or nullptr.
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  Logger* logger() const { return loggers_.empty() ? nullptr : loggers_.front().get(); }
  /// Where checkpoints and logs go: the first logger's version dir, else default_root_dir.
  std::string log_dir() const;
  TrainModule* module() { return module_; }
  /// Counts for tests and tools: validation runs (not sanity), optimizer steps skipped, etc.
  int64_t validation_runs() const { return val_runs_; }
  /// Training steps whose loss was NaN/Inf on some rank (same on every rank) in the last fit; acted on per
  /// options().on_nonfinite_loss.
  int64_t nonfinite_losses() const { return nonfinite_losses_; }
  /// The parsed `precision` option, and the loss scaler of "16-mixed" (nullptr in the other modes).
  Precision precision() const { return precision_; }
  GradScaler* grad_scaler() { return scaler_.get(); }
  /// The built-in profiler (TrainerOptions::profiler; nullptr without one): after fit/validate/test/predict it
  /// holds that stage's tables.
  Profiler* profiler() { return profiler_.get(); }
  /// Where the profiler wrote its files last ("" before any).
  const std::string& profiler_output_dir() const { return profile_dir_; }
  /// Sends `metrics` to the loggers at the current step (the latest optimizer step) and into logged_metrics()
  /// (rank 0; other ranks have no loggers). For callbacks such as ThroughputMonitor.
  void log_metrics(const MetricMap& metrics);
  /// True when a batch ending now completes an optimizer step (callbacks' on_train_batch_end: the step counter
  /// has advanced).
  bool stepped_last_batch() const { return stepped_last_batch_; }
  /// True while fitting with a validation loader whose module implements validation_step.
  bool has_validation() const { return has_val_ && val_has_step_; }

  // ---- manual optimisation (used by TrainModule::manual_backward and ManualOptimizer) --------------------
  void manual_backward(const Tensor& loss);
  void manual_optimizer_step(optim::Optimizer& optimizer, int index);
  bool manual_sync_grad() const { return manual_sync_grad_; }
  void set_manual_sync_grad(bool on) { manual_sync_grad_ = on; }

  /// Writes `<stem>.safetensors` then `<stem>.json` (both atomic; see checkpoint.h). Rank 0 writes; every rank
  /// must call (the decision is agreed). `stem` may be relative to the working directory.
  void save_checkpoint(const std::string& stem);

 private:
  struct LoopPosition {
    int64_t epoch = 0;
    int64_t batches_done = 0;  ///< training batches finished in `epoch`
  };
  void setup_fit(TrainModule& module);
  void attach(TrainModule& module);
  void detach(RunStatus status = RunStatus::success);  ///< finalizes the loggers with `status`
  void run_fit(std::shared_ptr<data::DataLoader> train, std::shared_ptr<data::DataLoader> val,
               const std::string& ckpt_path);
  // The fit loop (loops/fit_loop.cpp): run_fit = reset, checks, restore, start (sanity check), epochs, finish.
  void reset_fit_state();
  void check_training_batches(const data::DataLoader& train);
  void start_fit(data::DataLoader* val);
  void run_epochs(std::shared_ptr<data::DataLoader> train, std::shared_ptr<data::DataLoader> val);
  void finish_fit();
  // The training epoch (loops/training_epoch_loop.cpp).
  struct EpochProgress {
    bool interrupted = false;     ///< left mid-epoch for an interrupt: no epoch-end work
    bool completed = true;        ///< false when a stop ended the epoch before its last batch
    bool validated_last = false;  ///< the last batch run was followed by a validation run
  };
  void train_epoch(data::DataLoader& train, data::DataLoader* val);
  int64_t start_train_epoch(data::DataLoader& train, data::DataLoader* val);  ///< returns the first batch index
  EpochProgress run_training_batches(data::DataLoader& train, data::DataLoader* val, int64_t start);
  void begin_training_batch(int64_t idx, int64_t start);  ///< profiling window, accumulation-window start
  void update_progress_bar(int64_t idx);
  void end_train_epoch(data::DataLoader* val, const EpochProgress& progress);
  void training_batch(const Batch& batch, int64_t batch_idx);
  /// on_nonfinite_loss: true when this batch's backward and step must be skipped (decision agreed by all ranks).
  bool skip_nonfinite_loss(const Tensor& loss);
  /// The step's forward: training_step (through the strategy, under autocast) and training_step_end.
  Tensor forward_loss(const Batch& batch, int64_t batch_idx, int64_t bs);
  /// on_before_backward, backward of `scaled`, on_after_backward, and when step_now the optimizer updates (and,
  /// with host_tail, the step count and the step schedulers: what a captured step leaves out).
  void backward_and_step(const Tensor& scaled, int64_t bs, bool step_now, bool host_tail);
  /// A defined training loss is one element and requires grad (the error names the module).
  void check_training_loss(const Tensor& loss) const;
  /// The device part of a captured step (trainer/step_graph.h): forward, backward and updates, no host tail.
  Tensor captured_step(const Batch& batch, int64_t batch_idx, int64_t bs);
  /// What keeps the training step from being captured under opt_.cuda_graphs ("" when nothing).
  std::string step_graph_obstacle() const;
  void optimizer_updates();      ///< every optimizer's step (with unscaling, clipping and zero_grad)
  void finish_optimizer_step();  ///< the host tail: global step and step schedulers
  void run_validation(data::DataLoader& val, bool sanity);
  /// Evaluation pass used by validation, test and sanity checking; fills results_eval_. Returns batches run.
  int64_t eval_loop(data::DataLoader& loader, const char* stage, int64_t max_batches, bool sanity);
  std::vector<MetricMap> run_eval_entry(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                        const char* stage, const std::string& ckpt_path);
  bool stop_allowed() const;
  bool time_exceeded() const;
  bool due_val_check(int64_t batch_idx) const;
  // ---- loggers (trainer_loggers.cpp) ----
  void setup_loggers(TrainModule& module);
  void log_step_metrics(ResultCollection& rc, int64_t step);
  void log_epoch_metrics(ResultCollection& rc);
  void log_to_loggers(const MetricMap& m, int64_t step);
  void save_loggers();
  /// Every logger is finalized even if one throws; the first error is rethrown, except for RunStatus::failed
  /// (an exception is already on its way), where errors are reported on stderr.
  void finalize_loggers(RunStatus status);
  /// Finalizes the loggers with RunStatus::failed when an exception leaves the entry point that holds it.
  struct FailedRunGuard {
    Trainer& trainer;
    int pending = std::uncaught_exceptions();
    ~FailedRunGuard() {
      if (std::uncaught_exceptions() > pending) {
        trainer.finalize_loggers(RunStatus::failed);
        trainer.release_sync_batchnorm();
        if (trainer.module_) trainer.strategy_->abandon(*trainer.module_);
        trainer.profile_abandon();
      }
    }
  };
  void update_callback_metrics(const MetricMap& m);
  void step_schedulers(SchedulerInterval interval);
  void resume_from(const std::string& ckpt_path, bool fitting);
  /// "" / a path unchanged; "last" and "best" resolved (agreed across ranks), or a clear error. (collective)
  std::string resolve_ckpt_path(const std::string& ckpt_path);
  /// True once every rank agrees that a stop signal arrived; sets interrupt_signal_. (collective) Mid-epoch
  /// callers pass every_step=false: with several ranks the question is then asked only every few steps.
  bool poll_interrupt(bool every_step = false);
  void print_results_table(const std::string& stage, const MetricMap& m) const;
  void prepare_loader(data::DataLoader& loader, bool training);
  /// The loader's next batch with its upload to the root device already queued (Batch::upload_ahead: a pinned
  /// batch goes over the copy stream and neither the host nor the compute stream waits for it); the caller calls
  /// wait_for_upload() when it takes the batch.
  std::optional<Batch> fetch_batch(data::DataLoader& loader);
  /// DataModule::prepare_data on each node's local rank 0, a barrier, then setup(stage) on every rank.
  void prepare_datamodule(data::DataModule& dm, const char* stage);
  /// The "step" of evaluation rows (see the header comment).
  int64_t eval_log_step() const;

  TrainerOptions opt_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<ProgressBar> pbar_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  bool loggers_set_up_ = false;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers_;
  bool manual_sync_grad_ = true;
  std::vector<SchedulerConfig> schedulers_;
  TrainModule* module_ = nullptr;

  ResultCollection results_train_{"train"};
  StepGraph step_graph_;  ///< the captured training step (cuda_graphs); dropped before the optimizers
  ResultCollection results_eval_{"validate"};
  MetricMap callback_metrics_;
  MetricMap logged_metrics_;
  MetricMap last_pbar_;

  Stage stage_ = Stage::none;
  int64_t epoch_ = 0;
  int64_t global_step_ = 0;
  int64_t batch_idx_ = 0;
  int64_t batches_done_ = 0;  ///< training batches finished in the current epoch
  int64_t num_train_batches_ = 0;
  int64_t resume_skip_ = 0;   ///< batches of the first epoch already done before a resume
  bool is_last_batch_ = false;
  bool should_stop_ = false;
  bool stop_agreed_ = false;  ///< should_stop_ after the last all-rank agreement
  int interrupt_signal_ = 0;  ///< agreed SIGINT/SIGTERM that stopped the current fit
  bool sanity_checking_ = false;
  bool val_has_step_ = true;
  bool has_val_ = false;
  int64_t val_runs_ = 0;
  int64_t nonfinite_losses_ = 0;
  bool nonfinite_stop_ = false;
  Precision precision_ = Precision::f32_true;
  std::unique_ptr<GradScaler> scaler_;  ///< "16-mixed" only
  /// Mixed modes: turns autocast on in `guard` (held by the caller around forward and loss of every stage);
  /// leaves it empty otherwise.
  void enter_forward(std::optional<AutocastGuard>& guard) const;
  /// "-true" modes: the batch's floating tensors in the parameters' dtype; the batch unchanged otherwise.
  Batch convert_input(Batch batch) const;
  // ---- profiling (trainer/profilers/profiler.h, runtime/trace.h) ----
  /// Starts the profiler for a stage (fit, validate, test, predict); a no-op without one.
  void profile_start(const char* stage);
  /// At the end of a stage: stops the profiler, prints (rank 0) and writes the reports into the directory agreed
  /// in attach() (no collective). Called by detach().
  void profile_finish();
  void open_profile_window();
  void close_profile_window() noexcept;
  /// A failed stage: closes the profiling window and drops the profiler's records (no report).
  void profile_abandon() noexcept;
  std::unique_ptr<Profiler> profiler_;
  bool overfit_ = false;                          ///< overfit_batches > 0
  int64_t window_start_batch_ = 0;                ///< first batch of the running accumulation window
  std::pair<uint64_t, uint64_t> window_rng_{0, 0};  ///< default generator (seed, offset) at that batch
  std::vector<nn::BatchNormBase*> synced_bns_;    ///< sync_batchnorm: the layers given the strategy's all-reduce
  void release_sync_batchnorm() noexcept;
  void apply_batch_limits();  ///< fast_dev_run / overfit_batches -> the limits, loggers and checkpointing they imply
  void setup_strategy();      ///< connectors/accelerator_connector.cpp: devices and strategy -> strategy_
  void setup_callbacks();     ///< connectors/callback_connector.cpp: the run's callbacks_
  void apply_benchmark_option();  ///< TrainerOptions::benchmark (and deterministic) -> set_cudnn_benchmark
  data::DataModule* fit_dm_ = nullptr;            ///< fit(module, dm): for reload_dataloaders_every_n_epochs
  std::shared_ptr<data::DataLoader> fit_train_;   ///< during fit: the training loader (estimated_stepping_batches)
  std::string profile_dir_;
  int64_t window_begin_ = -1, window_end_ = -1;  ///< profile_steps
  bool window_open_ = false, window_done_ = false;
  bool stepped_last_batch_ = false;
  int64_t max_epochs_ = 1000;
  double max_time_s_ = -1;
  std::chrono::steady_clock::time_point fit_start_;
  nlohmann::json pending_rng_;  ///< RNG state to restore after the sanity check on resume
};

}  // namespace volt
