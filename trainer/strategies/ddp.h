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
/// - Nodes: the world size must be num_nodes x devices (devices="auto": the processes split evenly over the
///   nodes), else every rank throws at construction naming the numbers; node_rank = global_rank / devices. A
///   launcher local rank other than global_rank % devices is reported on stderr (trainer/strategies/node_layout.h).
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
#include <string>

#include <volt/distributed/grad_reducer.h>
#include <volt/distributed/process_group.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/node_layout.h>
#include <volt/trainer/strategies/strategy.h>

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
  /// The launcher's local rank (this process's rank among those on its host): it picks the GPU. Under
  /// node-by-node placement it equals global_rank % devices; otherwise layout_warning() says so.
  int local_rank() const override { return group_->local_rank(); }
  int world_size() const override { return group_->world_size(); }
  int num_nodes() const override { return layout_.num_nodes; }
  int node_rank() const override { return layout_.node_rank; }
  /// num_nodes x devices as the options describe the job (checked against the world size at construction).
  const NodeLayout& layout() const { return layout_; }
  /// Non-empty when the launcher's local rank differs from layout().local_rank (printed to stderr as well).
  const std::string& layout_warning() const { return layout_warning_; }
  dist::ProcessGroup& group() { return *group_; }

  void setup(nn::Module& module) override;
  void backward(const Tensor& loss, bool sync_grad) override;
  void finish_gradient_sync() override;
  void teardown(nn::Module& module) override;
  void process_dataloader(data::DataLoader& loader, bool training, bool shuffle, uint64_t seed) override;

  void reduce_values(std::vector<double>& values, dist::ReduceOp op) override;
  void all_reduce_sum(Tensor& t) override;
  void barrier(const std::string& name = "") override;
  Tensor all_gather(const Tensor& t, bool sync_grads = false) override;
  std::vector<Tensor> all_gather_uneven(const Tensor& t) override;
  double broadcast_value(double value, int src = 0) override;
  std::string broadcast_string(const std::string& s, int src = 0) override;
  bool reduce_decision(bool decision, bool all = false) override;
  void prepare_metric(metrics::Metric& metric) override;

  const dist::GradReducer* reducer() const { return reducer_.get(); }

 private:
  dist::ProcessGroup* group_ = nullptr;
  NodeLayout layout_;
  std::string layout_warning_;
  Device device_ = kCPU;
  bool find_unused_ = false;
  std::unique_ptr<dist::GradReducer> reducer_;
};

/// The factory the strategy registry (trainer/strategies/registry.cpp) uses for "ddp" / "ddp_spawn" (and "auto" with several devices).
std::unique_ptr<Strategy> make_ddp_strategy(const DeviceSelection& devices);

}  // namespace volt
