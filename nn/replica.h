#pragma once
/// @file
/// Which data-parallel replica this thread runs. Under the `dp` and `ddp2` strategies (trainer/strategies/dp.h)
/// one module is shared by several replicas, each running the step on its slice of the batch on its own thread.
/// Layers with state that forward changes read replica_index() and change it on replica 0 only, as upstream's
/// DataParallel keeps the state changes of the replica on the first device and loses the others (BatchNorm's
/// running statistics and num_batches_tracked). Outside a replica (single device, DDP, evaluation of one batch)
/// replica_index() is 0.
namespace volt::nn {

/// The replica running on this thread: 0 outside a ReplicaScope.
int replica_index();

/// RAII: marks this thread as running replica `index` (>= 0) for the scope's lifetime; scopes nest.
class ReplicaScope {
 public:
  explicit ReplicaScope(int index);
  ~ReplicaScope();
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;

 private:
  int prev_;
};

}  // namespace volt::nn
