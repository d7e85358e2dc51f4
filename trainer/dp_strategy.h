#pragma once
/// @file
/// Data-parallel replicas inside one process: the `dp` strategy (one process drives several devices) and `ddp2`
/// (dp inside each process, DDP across processes).
///
/// @code{.unparsed}
///   build/examples/mnist_mlp --strategy dp --devices 2                   # 2 virtual CPU devices, one process
///   mpirun -np 2 build/examples/mnist_mlp --strategy ddp2 --devices 2    # 2 processes x 2 virtual CPU devices
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
/// The replicas share the one module (its parameters are only read by forward), so:
/// - State changes made by a step are kept from replica 0 only (nn/replica.h): BatchNorm's running statistics
///   follow replica 0's slice, as upstream's DataParallel keeps the first device's replica's buffer updates.
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
/// - Devices: on the CPU `devices=N` gives N virtual CPU devices (threads; no processes are started). On GPUs one
///   module cannot be shared by several devices' replicas, so dp accepts one GPU (one replica) and refuses more
///   with an error naming `ddp`; ddp2 runs on CPU processes.
/// - Samplers and batch sizes: dp does not shard the data and its world size is 1, so the
///   effective batch is the loader's batch (split over the devices); ddp2 shards the data over the processes as
///   ddp does, effective batch = batch x processes (x accumulate_grad_batches).
#include <memory>
#include <string>

#include <volt/trainer/ddp_strategy.h>
#include <volt/trainer/device_parser.h>
#include <volt/trainer/strategy.h>

namespace volt {

namespace detail {
class ReplicaPool;
}

class DPStrategy : public Strategy {
 public:
  explicit DPStrategy(const DeviceSelection& devices);
  ~DPStrategy() override;
  std::string name() const override { return "dp"; }
  Device root_device() const override { return root_; }
  /// Replicas per step (the most; a smaller batch uses fewer).
  int devices() const { return devices_; }
  void setup(TrainModule& module) override;
  StepOutput run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) override;

 private:
  Device root_ = kCPU;
  int devices_ = 1;
  std::unique_ptr<detail::ReplicaPool> pool_;  ///< devices - 1 threads for replicas 1..
};

class DDP2Strategy : public DDPStrategy {
 public:
  /// The processes come from the launcher (mpirun -np P: world size P; without one, a world of 1); `devices` is
  /// the number of virtual CPU devices each process drives.
  explicit DDP2Strategy(const DeviceSelection& devices);
  ~DDP2Strategy() override;
  std::string name() const override { return "ddp2"; }
  int devices() const { return devices_; }
  void setup(TrainModule& module) override;
  StepOutput run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) override;

 private:
  int devices_ = 1;
  std::unique_ptr<detail::ReplicaPool> pool_;
};

/// The factories make_strategy() uses for "dp" and "ddp2".
std::unique_ptr<Strategy> make_dp_strategy(const DeviceSelection& devices);
std::unique_ptr<Strategy> make_ddp2_strategy(const DeviceSelection& devices);

}  // namespace volt
