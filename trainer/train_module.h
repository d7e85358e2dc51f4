#pragma once
/// @file
/// TrainModule: the model-plus-recipe base class the Trainer drives (the LightningModule contract).
///
/// A subclass registers its layers like any nn::Module and overrides:
/// @code{.unparsed}
///   training_step(batch, batch_idx) -> loss   (an undefined Tensor skips the backward/step for this batch)
///   validation_step / test_step               (log metrics; optional: no override = no validation loop)
///   predict_step -> Tensor                    (default: forward of nothing; override to predict)
///   configure_optimizers() -> Optimizers      (one or more optimizers, optional LR schedulers)
/// @endcode
/// and any hook it needs. Hooks run on every rank.
///
/// Steps with several outputs and the `*_step_end` hooks (under every strategy):
/// @code{.unparsed}
///   training_step_outputs -> StepOutput  (default: {"loss": training_step(...)})
///   validation_step_outputs / test_step_outputs -> StepOutput  (default: the void step, no outputs)
///   training_step_end(outputs) -> loss   (default: outputs["loss"], its mean when it holds one loss per replica)
///   validation_step_end(outputs) / test_step_end(outputs)  (default: nothing)
/// @endcode
/// One device per process: `*_step_end` receives the step's outputs unchanged. Under `dp` / `ddp2` (trainer/
/// dp_strategy.h) the steps run CONCURRENTLY, one thread per replica, on slices of the batch, sharing this module
/// (or, with replicas, each on its own copy: make_replica);
/// `*_step_end` then runs once on the calling thread with the gathered outputs: 0-d tensors (the per-replica
/// losses) stacked to (replicas,), the others concatenated along dim 0. Update metric objects and call
/// collectives (all_gather) in `*_step_end`, not in the steps; log() from a step is recorded per replica and
/// merged (trainer/strategies/dp.h).
///
/// Logging (docs/trainer_contract.md "Logging"): log(name, value, options) records a scalar in the Trainer's result
/// collection for the current stage. Defaults depend on the hook: training-step hooks log on_step, epoch-level
/// and evaluation hooks log on_epoch. on_step && on_epoch sends `name_step` and `name_epoch` to the logger;
/// callbacks see the plain name too. Tensor values stay on their device until something reads them.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/data/batch.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/enums.h>
#include <volt/trainer/manual_optimizer.h>
#include <volt/trainer/collectives.h>
#include <volt/trainer/log_options.h>
#include <volt/trainer/step_output.h>

namespace volt {

namespace metrics {
class Metric;
}

using Batch = data::Batch;
class Trainer;
class ResultCollection;
class ManualOptimizer;
namespace detail {
class ModuleReplicas;
}


/// An LR scheduler and when the Trainer steps it: every `frequency` epochs (SchedulerInterval::epoch) or
/// optimizer steps (SchedulerInterval::step).
struct SchedulerConfig {
  std::shared_ptr<optim::LRScheduler> scheduler;
  SchedulerInterval interval = SchedulerInterval::epoch;
  int64_t frequency = 1;
};

/// What configure_optimizers() returns. Converts implicitly from one optimizer (by value or shared_ptr).
/// With several optimizers, automatic optimisation runs one backward per batch and steps them all in order.
struct Optimizers {
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;

  Optimizers() = default;
  Optimizers(std::shared_ptr<optim::Optimizer> opt) { optimizers.push_back(std::move(opt)); }  // NOLINT
  template <class O>
    requires std::is_base_of_v<optim::Optimizer, std::decay_t<O>> && (!std::is_lvalue_reference_v<O>)
  Optimizers(O&& opt) {  // NOLINT: `return SGD(params, {...});`
    optimizers.push_back(std::make_shared<std::decay_t<O>>(std::move(opt)));
  }
  template <class O>
    requires std::is_base_of_v<optim::Optimizer, O>
  Optimizers(std::shared_ptr<O> opt) { optimizers.push_back(std::move(opt)); }  // NOLINT
  Optimizers(std::shared_ptr<optim::Optimizer> opt, SchedulerConfig sched) {
    optimizers.push_back(std::move(opt));
    schedulers.push_back(std::move(sched));
  }
};

class TrainModule : public nn::Module {
 public:
  TrainModule() = default;
  ~TrainModule() override = default;
  std::string type_name() const override { return "TrainModule"; }

  // ---- steps ---------------------------------------------------------------------------------------------
  virtual Tensor training_step(const Batch& batch, int64_t batch_idx);
  virtual void validation_step(const Batch& batch, int64_t batch_idx);
  virtual void test_step(const Batch& batch, int64_t batch_idx);
  virtual Tensor predict_step(const Batch& batch, int64_t batch_idx);
  virtual Optimizers configure_optimizers();
  /// Data-parallel replicas (strategy "dp"/"ddp2" over several GPUs, or TrainerOptions::dp_replicas on virtual
  /// CPU devices; trainer/strategies/dp.h): a NEW module of the same architecture as this one, in its constructed
  /// state (for example `return std::make_unique<MyNet>(hidden);`), or nullptr (the default) when this module
  /// cannot be replicated. The strategy calls it once per extra device at setup, checks that the replica has
  /// this module's parameter and buffer names, shapes and dtypes (after applying the precision's parameter
  /// dtype), moves it to its device, and before every step copies this module's parameters and buffers into it.
  /// Only the replica's steps run (training/validation/test_step and their `*_outputs`); hooks, `*_step_end`,
  /// optimizers and logging targets stay with this module.
  virtual std::unique_ptr<TrainModule> make_replica() const { return nullptr; }
  /// Whether the training step may be captured as a graph and replayed (TrainerOptions::cuda_graphs = automatic;
  /// trainer/step_graph.h): true when training_step, training_step_end and the hooks inside the step
  /// (on_before_backward, on_after_backward, on_before_optimizer_step, on_before_zero_grad) do the same device work
  /// for every batch of one shape, read nothing from the device (no item()), keep no host state that changes per
  /// step, and log tensors (a logged host number would be frozen at its captured value) and no metric objects.
  /// Their host code then runs once, at the capture. Default false.
  virtual bool static_training_step() const { return false; }
  /// strategy="fsdp": dotted names of submodules to wrap as units, added to TrainerOptions::fsdp_wrap
  /// (trainer/strategies/fsdp_wrap.h). Default: none.
  virtual std::vector<std::string> fsdp_wrap_modules() const { return {}; }
  /// Steps that return named outputs for the `*_step_end` hooks (see the file comment). Override these instead
  /// of the single-output steps when a step_end hook needs more than the loss (e.g. {"loss", "y_hat"}).
  virtual StepOutput training_step_outputs(const Batch& batch, int64_t batch_idx);
  virtual StepOutput validation_step_outputs(const Batch& batch, int64_t batch_idx);
  virtual StepOutput test_step_outputs(const Batch& batch, int64_t batch_idx);
  /// Receives the (gathered) step outputs and returns the loss to backpropagate (undefined: skip the batch).
  /// Default: outputs["loss"] as it is when it has one element, else its mean (the per-replica losses).
  virtual Tensor training_step_end(const StepOutput& outputs);
  virtual void validation_step_end(const StepOutput& outputs) {}
  virtual void test_step_end(const StepOutput& outputs) {}

  // ---- hooks (default: nothing) --------------------------------------------------------------------------
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  /// Returning false from on_train_batch_start skips the rest of this batch (no step, no logging).
  virtual bool on_train_batch_start(const Batch& batch, int64_t batch_idx) { return true; }
  virtual void on_train_batch_end(const Tensor& loss, const Batch& batch, int64_t batch_idx) {}
  virtual void on_before_backward(const Tensor& loss) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(optim::Optimizer& optimizer, int optimizer_idx) {}
  virtual void on_before_zero_grad(optim::Optimizer& optimizer) {}

  // ---- logging -------------------------------------------------------------------------------------------
  /// `value` must hold one element (any float dtype, any device); it is detached.
  void log(const std::string& name, const Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});
  /// A metric object: compute() at epoch end (synced across ranks by the metric's sync hook), then reset().
  /// Only on_epoch logging is supported for metric objects (on_step=true throws).
  void log(const std::string& name, metrics::Metric& metric, LogOptions options = {});
  void log_dict(const std::map<std::string, Tensor>& values, LogOptions options = {});
  void log_dict(const std::map<std::string, double>& values, LogOptions options = {});

  // ---- context -------------------------------------------------------------------------------------------
  Device device() const { return device_; }
  Trainer* trainer() const { return trainer_; }
  int global_rank() const;
  int world_size() const;
  bool is_global_zero() const { return global_rank() == 0; }
  int64_t current_epoch() const;
  int64_t global_step() const;
  // ---- all_gather (docs/trainer_contract.md "all_gather") -------------------------------------------------
  /// Collectives: every rank must call them, in the same order (a call made by only some ranks fails with the
  /// group's timeout, or at once naming the collective in debug mode). Results are detached and live on
  /// device(). With one process (also a DDP run of world size 1) every input comes back unchanged.
  /// @code{.unparsed}
  ///   Tensor (s...) with equal shapes on every rank -> (world, s...), in rank order.
  /// @endcode
  /// With sync_grads the result is not detached: gradients flow back to every rank's `t` (each rank's input
  /// gets the sum over ranks of the gradient that reached its row), as upstream's all_gather(sync_grads=True);
  /// every rank must then run a backward through it. One process: `t` itself, gradients included.
  Tensor all_gather(const Tensor& t, bool sync_grads = false) const;
  /// @code{.unparsed}
  ///   A number -> (world,) f64 tensor; with one process a 0-d f64 tensor holding the value (the "unchanged"
  ///   rule applied to a scalar: no leading world dimension is added).
  /// @endcode
  Tensor all_gather(double value) const;
  /// @code{.unparsed}
  ///   Containers keep their structure: each element is gathered as above. Every rank must pass the same
  ///   number of tensors / the same keys (checked: a mismatch throws volt::Error on every rank).
  /// @endcode
  std::vector<Tensor> all_gather(const std::vector<Tensor>& tensors) const;
  std::map<std::string, Tensor> all_gather(const std::map<std::string, Tensor>& tensors) const;
  /// First dims may differ per rank (trailing dims must match): one tensor per rank, in rank order, with each
  /// rank's own first dim. One process: {t}.
  std::vector<Tensor> all_gather_uneven(const Tensor& t) const;

  /// Stored in checkpoints and written by the logger (hparams.yaml).
  void save_hyperparameters(nlohmann::json hparams) { hparams_ = std::move(hparams); }
  const nlohmann::json& hparams() const { return hparams_; }

  // ---- manual optimisation (trainer/manual_optimizer.h) -----------------------------------------------
  /// Set to false (e.g. in the constructor) to drive the optimizers yourself in training_step.
  bool automatic_optimization = true;
  /// The configured optimizers, wrapped for manual use (valid during fit).
  std::vector<ManualOptimizer> optimizers();
  /// Backpropagates `loss` through the strategy (DDP: gradient buckets synced unless inside
  /// toggle_model(sync_grad=false)); the gradients are final when it returns.
  void manual_backward(const Tensor& loss);

  /// Sets requires_grad=false on parameters that `optimizer` does not own (and remembers the previous flags);
  /// untoggle_optimizer restores them. For multi-optimizer modules (GAN-style) that want per-optimizer grads.
  /// Under zero1/zero2 (whose optimizers hold flat shards) "owns" means the parameters the shards stand for.
  void toggle_optimizer(const optim::Optimizer& optimizer);
  void untoggle_optimizer();

 private:
  friend class Trainer;
  friend class LogScope;
  friend class detail::ModuleReplicas;  ///< gives a replica this module's Trainer and its own device
  std::vector<Tensor> toggled_parameters(const optim::Optimizer& optimizer) const;
  Trainer* trainer_ = nullptr;
  Device device_ = kCPU;
  nlohmann::json hparams_ = nlohmann::json::object();
  /// Where log() writes and what the current hook is (set by the Trainer around every hook call).
  ResultCollection* results_ = nullptr;
  const char* hook_ = nullptr;
  int64_t batch_size_ = 0;
  std::atomic<bool> default_step_called_{false};  ///< set by the default validation step: "not overridden" (dp
                                                  ///< replicas may set it from several threads)
  std::vector<std::pair<Tensor, bool>> toggled_;
};

/// RAII: points a module's log() at `results` for the duration of one hook call.
class LogScope {
 public:
  LogScope(TrainModule& m, ResultCollection* results, const char* hook, int64_t batch_size = 0);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  TrainModule& m_;
  ResultCollection* prev_results_;
  const char* prev_hook_;
  int64_t prev_batch_size_;
  trace::Range range_;  ///< `"[TrainModule]<hook>"` in the trainer layer (runtime/trace.h)
};

}  // namespace volt
