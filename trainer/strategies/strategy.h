#pragma once
/// @file
/// Strategy: how the Trainer places the model and how ranks cooperate. The Trainer's loops are written once
/// against this interface; SingleDeviceStrategy (one process, one device) is the identity for every
/// collective, and a DDP strategy (one process per device, gradient all-reduce through a bucketed reducer on
/// grad-ready hooks) slots in by overriding the virtuals below.
///
/// Collective contract: every method marked (collective) must be called by every rank, in the same order.
/// The Trainer guarantees that: all decisions that could differ per rank (stop, save, skip) are agreed
/// through reduce_decision / broadcast_* before anyone acts on them.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/data/batch.h>
#include <volt/data/data_loader.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/tensor.h>
#include <volt/nn/module.h>
#include <volt/trainer/checkpoint/sharded.h>
#include <volt/trainer/collectives.h>
#include <volt/trainer/step_output.h>

namespace volt {

class TrainModule;
namespace metrics {
class Metric;
}
namespace optim {
class Optimizer;
}


class Strategy : public Collectives {
 public:
  virtual std::string name() const = 0;

  virtual Device root_device() const = 0;

  /// Moves the module to root_device() and (DDP) broadcasts rank 0's parameters and buffers so that every
  /// replica starts identical, then installs gradient hooks. (collective)
  virtual void setup(nn::Module& module);
  /// Called by the Trainer right after setup(), with the training module: the strategies that need the
  /// training-module contract read it here (dp/ddp2 build their replicas through make_replica and need
  /// automatic optimisation; fsdp adds fsdp_wrap_modules to its wrap policy). Default: nothing.
  virtual void bind(TrainModule& module) {}
  /// Called once the optimizers exist (DDP: nothing; the ZeRO strategies move each optimizer onto this rank's
  /// shards of the parameters here: its groups then hold flat shard tensors, see trainer/strategies/zero.h).
  virtual void setup_optimizers(std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {}
  /// Called after every optimizer step (automatic or manual, taken or skipped by the grad scaler). ZeRO:
  /// all-gathers the updated shards into the full parameters. (collective for sharded strategies)
  virtual void after_optimizer_step(optim::Optimizer& optimizer) {}
  /// Gradient clipping by norm over `params` (an optimizer's parameters) without a host read; returns the total
  /// norm (0-dim f64). Sharded strategies take the norm over every rank's shard. (collective for them)
  virtual Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
  /// Drops gradients accumulated outside the optimizers' reach (ZeRO: the parameters' full .grad of an
  /// accumulation window that a non-finite loss discarded).
  virtual void discard_gradients() {}
  /// Checkpoints: an optimizer's tensors and hyper-state (Optimizer::state_dict / hyper_state) in the full,
  /// unsharded layout that every strategy writes and reads, so a checkpoint resumes under any strategy and
  /// world size. (collective: sharded strategies gather the state)
  struct OptimizerState {
    nn::StateDict tensors;
    std::map<std::string, double> hyper;
  };
  virtual OptimizerState optimizer_state(const optim::Optimizer& optimizer);
  virtual void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& sd);
  virtual void load_optimizer_hyper_state(optim::Optimizer& optimizer, const std::map<std::string, double>& hs);
  /// Sharded checkpoints (TrainerOptions::checkpoint_layout = sharded, trainer/checkpoint/sharded.h). True when
  /// this strategy keeps optimizer state in flat shards that each rank can write without a gather (zero1/zero2);
  /// the others write the full layout for either setting.
  virtual bool shards_optimizer_state() const { return false; }
  /// An optimizer's state as this rank holds it: `replicated` (tensors every rank holds alike, such as step
  /// counts, in full-layout keys, and the hyper-state as optimizer_state() gives it), this rank's `flats` (keys
  /// relative to the optimizer, slot keys in the full layout), and `order`: every full-layout tensor key of the
  /// optimizer in the order optimizer_state() lists them. Local: no communication. Default: a volt::Error.
  struct ShardedOptimizerState {
    OptimizerState replicated;
    std::vector<FlatShard> flats;
    std::vector<std::string> order;
  };
  virtual ShardedOptimizerState sharded_optimizer_state(const optim::Optimizer& optimizer);
  /// True when `flats` (from a sharded checkpoint's record, keys relative to the optimizer, tensors: this
  /// rank's slices) lay out exactly what this rank holds, so load_sharded_optimizer_state can take them as they
  /// are. Default: false (the checkpoint is consolidated and loaded through load_optimizer_state).
  virtual bool matches_sharded_layout(const optim::Optimizer& optimizer, const std::vector<FlatShard>& flats) {
    return false;
  }
  /// Loads this rank's slices directly; `replicated` holds the checkpoint's other tensors of this optimizer in
  /// full-layout keys. Only after matches_sharded_layout said true. Default: a volt::Error.
  virtual void load_sharded_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& replicated,
                                            const std::vector<FlatShard>& flats);
  /// The module parameters an optimizer steps (toggle_optimizer): its parameter groups' tensors, or under a
  /// sharded strategy (whose optimizers hold flat shards) the parameters those shards stand for.
  virtual std::vector<Tensor> optimizer_parameters(const optim::Optimizer& optimizer);
  /// Checkpoints: the module's parameters and buffers in the full layout (Module::state_dict). (collective:
  /// FSDP gathers the shards and returns the values on rank 0 only, the rank that writes; other ranks get an
  /// empty dict.) load_module_state_dict copies a full-layout dict in, strict (collective under FSDP).
  virtual nn::StateDict module_state_dict(nn::Module& module);
  virtual void load_module_state_dict(nn::Module& module, const nn::StateDict& sd);
  /// Bracket every step the Trainer runs the module in: a training batch (training_step through backward and
  /// the optimizer step), each validation/test/predict step. FSDP gathers the root unit's parameters (those of
  /// no wrapped submodule) in begin and frees every unit still gathered in end. (collective for FSDP)
  virtual void module_step_begin() {}
  virtual void module_step_end() {}
  /// Runs one training/validation/test step on `batch` and returns what the `*_step_end` hook receives. One
  /// device per process: `step(batch)` on the calling thread. Data-parallel replicas (dp, ddp2): the batch is
  /// split along dim 0, `step` runs once per replica on its own thread, and the outputs are gathered on the
  /// root device (trainer/strategies/dp.h).
  virtual StepOutput run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) {
    return step(module, batch);
  }
  /// Runs loss.backward(). `sync_grad` is false on accumulation batches that do not step: a DDP strategy then
  /// skips the gradient all-reduce (the gradients accumulate locally and are synced on the stepping batch).
  virtual void backward(const Tensor& loss, bool sync_grad);
  /// Called after backward and before clipping/optimizer.step(): DDP waits for in-flight gradient buckets
  /// here, so gradients are final (and averaged) before anyone reads them.
  virtual void finish_gradient_sync() {}
  virtual void teardown(nn::Module& module) {}
  /// A stage failed on this rank (an exception leaves fit/validate/test): drop every hook this strategy put on
  /// the module, locally (no collective: other ranks may be gone), so that the module no longer calls into the
  /// strategy. FSDP's parameters then stay released (each rank kept only its shard; reading one is the
  /// "storage released" error): resume from a checkpoint.
  virtual void abandon(nn::Module& module) noexcept {}

  /// Replaces a loader's sampler with this rank's distributed shard (training: shuffled with `seed` and
  /// padded; evaluation: user order, every sample exactly once). Single device: unchanged.
  /// `shuffle`: the training loader should be shuffled (the Trainer decides: the loader asked for it and
  /// overfit_batches is off).
  virtual void process_dataloader(data::DataLoader& loader, bool training, bool shuffle, uint64_t seed) {}
};

/// One process on one device (CPU or one GPU).
class SingleDeviceStrategy : public Strategy {
 public:
  explicit SingleDeviceStrategy(Device device = kCPU) : device_(device) {}
  std::string name() const override { return "single_device"; }
  Device root_device() const override { return device_; }

 private:
  Device device_;
};

/// The names TrainerOptions::strategy accepts and the factories behind them: trainer/strategies/registry.h.

}  // namespace volt
