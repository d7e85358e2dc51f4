#pragma once
/// @file
/// TrainerOptions: every Trainer flag, designated-initialiser friendly:
/// @code
///   volt::Trainer trainer({.max_epochs = 3, .limit_train_batches = 0.25, .val_check_interval = 100});
/// @endcode
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/trainer/enums.h>
#include <volt/trainer/precision/precision.h>

namespace volt {

class Callback;
class Logger;

/// A batch count or a fraction of an epoch: `= 10` means 10 batches, `= 0.25` a quarter of the loader
/// (1.0, the default for limits, means all of it).
struct BatchAmount {
  bool is_fraction = true;
  double fraction = 1.0;
  int64_t count = 0;
  BatchAmount() = default;
  BatchAmount(double f) : is_fraction(true), fraction(f) {}                       // NOLINT
  BatchAmount(int n) : is_fraction(false), count(n) {}                            // NOLINT
  BatchAmount(int64_t n) : is_fraction(false), count(n) {}                        // NOLINT
  /// Batches out of `total` (what limit_*_batches yields). `what` names the option in errors.
  int64_t resolve(int64_t total, const char* what) const;
};

/// What the Trainer does when a training step's loss is NaN or Inf (checked before backward; under DDP the
/// ranks agree, so when any rank's loss is non-finite every rank acts the same way).
enum class NonFiniteLoss {
  ignore,  ///< backpropagate as usual (the upstream behaviour)
  skip,    ///< skip the step: no backward, the accumulated gradients are discarded, global_step does not advance
  stop,    ///< skip the step and end fit after it (overrides min_epochs/min_steps)
};

/// Whether the Trainer captures the training step as a graph and replays it (trainer/step_graph.h).
enum class CudaGraphs {
  automatic,  ///< on a GPU, when the step qualifies and the module declares it static (TrainModule::static_training_step)
  on,         ///< whenever the step qualifies (an error naming what disqualifies it otherwise); on the CPU the
              ///< step is recorded as kernel calls: the same results, for testing code meant for capture
  off,        ///< never
};

struct TrainerOptions {
  std::string accelerator = "auto";   ///< "cpu", "gpu" ("cuda"), "auto"
  std::string devices = "auto";       ///< "auto", "1", "2", "-1", "1,3", ...
  bool auto_select_gpus = false;      ///< with devices="k" on GPUs: pick k GPUs not busy with other processes
  /// "auto", "single_device", "ddp", "ddp_spawn", "zero1", "zero2", "fsdp", "dp", "ddp2", or a name a program
  /// registered (trainer/strategies/registry.h).
  std::string strategy = "auto";
  /// strategy="fsdp": how the model is cut into units (trainer/strategies/fsdp_wrap.h). A submodule whose trainable
  /// parameters not yet in a unit number at least fsdp_min_num_params becomes a unit (0: no auto-wrap), and so
  /// does every module named in fsdp_wrap ("encoder", "decoder.l1"; a name matching no module is an error).
  /// The root unit holds the rest. Setting either under another strategy is an error.
  int64_t fsdp_min_num_params = 0;
  std::vector<std::string> fsdp_wrap;
  /// strategy="dp"/"ddp2" on virtual CPU devices: run each extra device's step on a module replica
  /// (TrainModule::make_replica) instead of sharing the one module, as dp always does over several GPUs
  /// (trainer/strategies/dp.h). Setting it under another strategy is an error.
  bool dp_replicas = false;
  /// Machines in a DDP job (>= 1). Under a launcher the world size must be num_nodes x devices (with
  /// devices="auto": the launcher's processes split evenly over the nodes); node_rank = global_rank / devices.
  /// See docs/trainer_contract.md "Distributed runs".
  int num_nodes = 1;
  /// "32-true" (default), "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true", or a legacy spelling
  /// (32, 16, "bf16", 64): see trainer/precision/precision.h.
  std::string precision = "32-true";
  GradScalerOptions grad_scaler;  ///< "16-mixed" only: the loss scaler's initial scale, growth and backoff

  int64_t max_epochs = -1;  ///< -1: 1000 when max_steps is also -1 (upstream default), else unlimited
  int64_t min_epochs = 0;
  int64_t max_steps = -1;   ///< optimizer steps; -1 = unlimited
  int64_t min_steps = 0;
  std::string max_time;     ///< "DD:HH:MM:SS" or seconds ("90", "1.5"); empty = no limit

  BatchAmount val_check_interval = 1.0;  ///< fraction of the epoch, or every N training batches
  int64_t check_val_every_n_epoch = 1;
  BatchAmount limit_train_batches = 1.0;
  BatchAmount limit_val_batches = 1.0;
  BatchAmount limit_test_batches = 1.0;
  BatchAmount limit_predict_batches = 1.0;
  int64_t num_sanity_val_steps = 2;      ///< -1 = the whole validation set

  int64_t accumulate_grad_batches = 1;
  double gradient_clip_val = 0.0;              ///< 0 = no clipping
  GradClipAlgorithm gradient_clip_algorithm = GradClipAlgorithm::norm;
  bool deterministic = false;
  /// cuDNN convolution algorithms chosen by timed trials (true) or by the heuristics (false) for the whole
  /// process (volt::set_cudnn_benchmark, kernels/cudnn_benchmark.h), set at construction. Unset: the switch
  /// stays as it is, except that deterministic = true turns it off (as upstream does). No effect on the CPU.
  std::optional<bool> benchmark;
  /// Anomaly detection during fit: the first op whose forward or backward yields NaN/Inf throws volt::Error
  /// naming the op, its module and its input shapes (slow: a host read per op; see autograd.h).
  bool detect_anomaly = false;
  NonFiniteLoss on_nonfinite_loss = NonFiniteLoss::ignore;  ///< counted in Trainer::nonfinite_losses()
  /// Capture the training step (forward, backward, clipping, optimizer updates) once and replay it for every later
  /// batch of the same shapes: one launch per step instead of the host's per-op work (trainer/step_graph.h says
  /// what qualifies). The same kernels and arguments as eager training: bit-identical on the CPU, and on a GPU
  /// wherever the kernels are deterministic.
  CudaGraphs cuda_graphs = CudaGraphs::automatic;

  bool enable_progress_bar = true;
  bool enable_model_summary = true;
  bool enable_checkpointing = true;  ///< adds a default ModelCheckpoint (last epoch) when none is given
  /// full: a sharded strategy (zero1/zero2) gathers its optimizer state and rank 0 writes the layout DDP writes.
  /// sharded: each rank writes its own shards, no gather (trainer/checkpoint/sharded.h); under strategies that
  /// hold no shards (single_device, ddp) rank 0 already holds everything and the full layout is written.
  CheckpointLayout checkpoint_layout = CheckpointLayout::full;
  std::string default_root_dir = ".";
  /// Where logged metrics go (trainer/loggers/logger.h: CSVLogger, TensorBoardLogger or your own). Empty with
  /// logger = true: one CSVLogger under `<default_root_dir>/lightning_logs/version_N`. logger = false: no logging
  /// (and then `loggers` must be empty).
  bool logger = true;
  std::vector<std::shared_ptr<Logger>> loggers;
  std::vector<std::shared_ptr<Callback>> callbacks;
  int64_t log_every_n_steps = 50;
  /// Non-empty: logging::set_level(parse_level(log_level)) at construction ("trace", "debug", "info", "warn",
  /// "error" or "off"; runtime/log.h), a process-wide setting. "" keeps the level in effect (VOLT_LOG_LEVEL or info).
  std::string log_level;
  /// Built-in profiler (trainer/profilers/profiler.h): "" (none), "simple" (time per hook and loop stage), "ops" (per-op,
  /// per-module and per-kernel times, CSV and Chrome trace) or "advanced" (both). Reports are printed on rank 0
  /// and written to profiler_dir, else `<log_dir>/profiler`.
  std::string profiler;
  std::string profiler_dir;
  /// "A:B": profile optimizer steps A to B-1 (0-based and half-open, like a slice): cudaProfilerStart before the
  /// first batch of step A, cudaProfilerStop after step B-1 (for `nsys profile --capture-range=cudaProfilerApi`
  /// and `ncu --profile-from-start off`), and the ops profiler records op-level ranges only in that window.
  /// "" = no window.
  std::string profile_steps;
  int64_t seed = -1;                 ///< >= 0: seed_everything(seed) at construction

  // ---- debugging runs and data reloading (upstream's flags of the same names) ----
  /// n > 0: a smoke test of every loop: n batches of training (max_steps = n, one epoch), validation, test and
  /// predict, no sanity check, and nothing logged or checkpointed (loggers, ModelCheckpoint and EarlyStopping
  /// are off). A message on rank 0 says so.
  int64_t fast_dev_run = 0;
  /// > 0: train and validate on the same first batches every epoch (a count, or a fraction of the loaders):
  /// limit_train_batches and limit_val_batches both become this, and the training loader's shuffling is turned
  /// off (with a warning) so the model sees the same batches each time. 0 = off.
  BatchAmount overfit_batches = 0.0;
  /// n > 0 with fit(module, datamodule): the DataModule's train and val loaders are requested again every n
  /// epochs (data that changes between epochs: curricula, regenerated samples). 0 = once per fit.
  int64_t reload_dataloaders_every_n_epochs = 0;
  /// Under DDP with several processes: every BatchNorm layer normalises training batches with the statistics of
  /// all processes' batches together (nn::BatchNormBase::set_sync), as one batch of the global size; the running
  /// estimates are then the same on every process. No effect with one process.
  bool sync_batchnorm = false;

  /// The range checks the Trainer makes before it uses these options: a volt::Error naming the first option out
  /// of range and what it accepts (counts >= 1 where a zero means nothing, fractions in (0, 1], known enum
  /// values). Options that need the machine (devices, strategy, precision) are checked where they are resolved.
  void validate() const;
};

/// Parses max_time: "DD:HH:MM:SS" or a number of seconds. Returns seconds (< 0 for "no limit").
double parse_max_time(const std::string& s);

}  // namespace volt
