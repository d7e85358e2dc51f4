#pragma once
/// @file
/// DDPStrategy: data-parallel training, one process per device (CPU processes or one GPU each).
///
/// @code{.unparsed}
///   mpirun -np 2 build/examples/mnist_mlp --strategy ddp      # CPU ranks over MPI
///   build/examples/mnist_mlp --strategy ddp --devices 2       # no launcher: the program starts its workers
/// @endcode
///
/// - Process group: MPI for CPU tensors, NCCL for GPUs (bootstrapped over MPI). Rank, world size and local rank
///   come from the launcher's environment; the local rank picks the GPU among the selected ids.
/// - Started without a launcher and asked for N > 1 devices ("ddp" or "ddp_spawn"), the process re-executes
///   itself under `mpirun -np N` (dist::spawn_workers_if_needed), waits, and exits with the job's status.
/// - setup(): the module moves to this rank's device, rank 0's parameters and buffers are broadcast, and a
///   bucketed GradReducer hooks every parameter so gradient buckets are all-reduced while backward runs.
/// - Loaders: training gets a padded DistributedSampler, shuffled (seeded from the global seed, reshuffled each
///   epoch) when the loader shuffled; evaluation an unshuffled, unpadded one, so every sample is evaluated
///   exactly once.
/// - Logged values and metric states are reduced with real collectives, so logged epoch values and metric
///   objects are global (docs/trainer_contract.md "Distributed runs").
#include <memory>

#include <volt/distributed/grad_reducer.h>
#include <volt/distributed/process_group.h>
#include <volt/trainer/device_parser.h>
#include <volt/trainer/strategy.h>

namespace volt {

namespace metrics {
class Metric;
}

class DDPStrategy : public Strategy {
 public:
  /// Uses the default process group, initialising it when needed.
  explicit DDPStrategy(const DeviceSelection& devices, bool find_unused_parameters = false);
  ~DDPStrategy() override;

  std::string name() const override { return "ddp"; }
  Device root_device() const override { return device_; }
  int global_rank() const override { return group_->rank(); }
  int local_rank() const override { return group_->local_rank(); }
  int world_size() const override { return group_->world_size(); }
  dist::ProcessGroup& group() { return *group_; }

  void setup(TrainModule& module) override;
  void backward(const Tensor& loss, bool sync_grad) override;
  void finish_gradient_sync() override;
  void teardown(TrainModule& module) override;
  void process_dataloader(data::DataLoader& loader, bool training, bool shuffle, uint64_t seed) override;

  void reduce_values(std::vector<double>& values, dist::ReduceOp op) override;
  void all_reduce_sum(Tensor& t) override;
  void barrier(const std::string& name = "") override;
  Tensor all_gather(const Tensor& t) override;
  std::vector<Tensor> all_gather_uneven(const Tensor& t) override;
  double broadcast_value(double value, int src = 0) override;
  std::string broadcast_string(const std::string& s, int src = 0) override;
  bool reduce_decision(bool decision, bool all = false) override;
  void prepare_metric(metrics::Metric& metric) override;

  const dist::GradReducer* reducer() const { return reducer_.get(); }

 private:
  dist::ProcessGroup* group_ = nullptr;
  Device device_ = kCPU;
  bool find_unused_ = false;
  std::unique_ptr<dist::GradReducer> reducer_;
};

/// The factory make_strategy() uses for "ddp" / "ddp_spawn" (and "auto" with several devices).
std::unique_ptr<Strategy> make_ddp_strategy(const DeviceSelection& devices);

}  // namespace volt
