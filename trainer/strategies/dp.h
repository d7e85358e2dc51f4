#pragma once
/// @file
/// Data-parallel replicas inside one process: the `dp` strategy (one process drives several devices) and `ddp2`
/// (dp inside each process, DDP across processes).
///
/// @code{.unparsed}
///   build/examples/mnist_mlp --strategy dp --devices 2                   # 2 virtual CPU devices, one process
///   mpirun -np 2 build/examples/mnist_mlp --strategy ddp2 --devices 2    # 2 processes x 2 virtual CPU devices
///   build/examples/mnist_mlp --strategy dp --devices 2 --dp-replicas     # a module replica per virtual device
///   build/examples/mnist_mlp --strategy dp --accelerator gpu --devices 2 # a module replica per GPU
/// @endcode
///
/// Every step (training, validation, test; Strategy::run_step) splits the batch along dim 0 into one slice per
/// device (every tensor of the Batch: input, target, fields; slices of ceil(B / devices) samples as torch.chunk,
/// so the last may be smaller and a batch of fewer samples than devices uses fewer replicas), runs the step on
/// every slice CONCURRENTLY, one thread per replica (replica 0 on the calling thread, the others on threads the
/// strategy keeps for its lifetime), gathers the outputs on the
/// root device (0-d tensors such as the per-replica losses stacked to (replicas,), the others concatenated along
/// dim 0) and hands them to `training_step_end` / `validation_step_end` / `test_step_end`, which run once on the
/// calling thread. training_step_end returns the loss (default: the mean of the per-replica losses, as upstream);
/// ONE backward on the calling thread runs through every replica's graph, so each parameter's gradient is the sum
/// of the replicas' contributions, accumulated once (DDP's gradient hooks fire once per parameter under ddp2).
///
/// Replicas on virtual CPU devices share the one module (its parameters are only read by forward); over several
/// GPUs (or with TrainerOptions::dp_replicas on the CPU) every extra device runs a module replica instead:
/// - TrainModule::make_replica() builds it (a new module of the same architecture; nullptr, the default, means
///   "not replicable": several GPUs then fail with an error saying to override it or to use `ddp`). At setup the
///   strategy makes one per extra device, checks its parameter, buffer and submodule names, shapes and dtypes
///   against the root's (an error names the first mismatch), and moves it to its device.
/// - Before each step, on the replica's thread with its device current, the root's current parameters and
///   buffers are copied into the replica (Tensor::copy_) and its training flags follow the root's. Under grad
///   mode each replica parameter is then a differentiable copy of the root's (a non-leaf whose backward moves
///   the gradient to the root's device), so the ONE backward sums every replica's contribution in the root
///   parameter's own gradient accumulator: optimizers, clipping, accumulation and DDP's hooks (ddp2) see what
///   they see with the shared module. The replica's slice goes to its device and its outputs come back to the
///   root device (differentiably) for the gather.
/// - Only the replica's steps run; hooks, `*_step_end`, optimizers and log() targets stay with the root.
///
/// Either way:
/// - State changes made by a step are kept from replica 0 only (nn/replica.h): BatchNorm's running statistics
///   follow replica 0's slice, as upstream's DataParallel keeps the first device's replica's buffer updates
///   (a module replica's buffers are overwritten from the root's at every step).
/// - Steps run concurrently: a step must not change shared state (module members, metric objects, counters).
///   Update metrics and call collectives (all_gather, which is refused inside a replica) in the `*_step_end`
///   hooks. Autograd's grad mode and autocast follow the calling thread into every replica.
/// - Random numbers (dropout): replica 0 draws from the global generator, replica r > 0 from its own stream
///   seeded from the global seed, a counter reserved from the global generator per step and r: runs repeat
///   exactly, and with one device dp draws exactly what single_device draws.
/// - log() from a step is recorded per replica and merged on the calling thread: reduce_fx "mean" logs the mean
///   of the replicas' values weighted by their batch sizes (so a per-sample mean such as a loss logs the value of
///   the whole batch), "sum" the sum, "min"/"max" the min/max, with the whole batch's size as batch size.
///   Logging from `*_step_end` goes straight to the results.
/// - Manual optimisation (manual_backward inside the step) and sync_batchnorm are refused: the step runs on
///   several threads. predict_step runs on the whole batch on the calling thread.
/// - Devices: on the CPU `devices=N` gives N virtual CPU devices (threads; no processes are started). On GPUs
///   dp drives the selected GPUs (the first is the root). ddp2 on GPUs takes a count k: the process of local
///   rank l (among L on its node) drives cuda:l (its NCCL device, the root), cuda:l+L, ..., cuda:l+(k-1)L.
/// - Samplers and batch sizes: dp does not shard the data and its world size is 1, so the
///   effective batch is the loader's batch (split over the devices); ddp2 shards the data over the processes as
///   ddp does, effective batch = batch x processes (x accumulate_grad_batches).
#include <memory>
#include <string>

#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/strategy.h>

namespace volt {

namespace detail {
class DataParallelRunner;
}

class DPStrategy : public Strategy {
 public:
  explicit DPStrategy(const DeviceSelection& devices);
  ~DPStrategy() override;
  std::string name() const override { return "dp"; }
  Device root_device() const override { return root_; }
  /// Replicas per step (the most; a smaller batch uses fewer).
  int devices() const { return devices_; }
  /// Module replicas on virtual CPU devices too (TrainerOptions::dp_replicas; several GPUs always use them), and
  /// the precision's parameter dtype, applied to each replica as the Trainer applied it to the root (f32, the
  /// 32-true default, leaves the replicas as constructed). The Trainer calls it before setup.
  void set_replicas(bool on_cpu, DType param_dtype);
  /// Whether the steps run on module replicas (known after setup).
  bool uses_replicas() const;
  /// Checks automatic optimisation and builds the replicas (TrainModule::make_replica).
  void bind(TrainModule& module) override;
  void teardown(nn::Module& module) override;
  StepOutput run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) override;

 private:
  Device root_ = kCPU;
  int devices_ = 1;
  std::unique_ptr<detail::DataParallelRunner> runner_;  ///< threads, devices and replicas
};

class DDP2Strategy : public DDPStrategy {
 public:
  /// The processes come from the launcher (mpirun -np P: world size P; without one, a world of 1); `devices` is
  /// the number of devices each process drives (virtual CPU devices, or GPUs as the file comment says).
  explicit DDP2Strategy(const DeviceSelection& devices);
  ~DDP2Strategy() override;
  std::string name() const override { return "ddp2"; }
  int devices() const { return devices_; }
  /// As DPStrategy::set_replicas.
  void set_replicas(bool on_cpu, DType param_dtype);
  bool uses_replicas() const;
  /// Checks automatic optimisation and builds the replicas (TrainModule::make_replica).
  void bind(TrainModule& module) override;
  void teardown(nn::Module& module) override;
  StepOutput run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) override;

 private:
  int devices_ = 1;
  std::unique_ptr<detail::DataParallelRunner> runner_;
};

/// The factories the strategy registry (trainer/strategies/registry.cpp) uses for "dp" and "ddp2".
std::unique_ptr<Strategy> make_dp_strategy(const DeviceSelection& devices);
std::unique_ptr<Strategy> make_ddp2_strategy(const DeviceSelection& devices);

}  // namespace volt
