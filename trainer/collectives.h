#pragma once
/// @file
/// Collectives: what the training module, the logged-result collection, callbacks and the grad scaler may ask
/// of the processes they run in (ranks, reductions, gathers, broadcasts, agreement on a decision). It is the
/// half of a Strategy (trainer/strategies/strategy.h) that such code needs; the other half (placing the module,
/// syncing gradients, sharding optimizer state, checkpoint layout) stays with the Trainer's loops.
///
/// On one process every call is the identity: values come back unchanged, a gather returns its input, a
/// decision is the caller's own. Every method marked (collective) must be called by every rank, in the same
/// order; the Trainer guarantees that for its own calls by agreeing on every decision that could differ per
/// rank (stop, save, skip) through reduce_decision / broadcast_* before anyone acts on it.
#include <optional>
#include <string>
#include <vector>

#include <volt/distributed/process_group.h>
#include <volt/kernels/tensor.h>

namespace volt {

namespace metrics {
class Metric;
}

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual int global_rank() const { return 0; }
  virtual int local_rank() const { return 0; }
  virtual int world_size() const { return 1; }
  /// Machines in the job and this process's machine (DDP: num_nodes, global_rank / devices per node).
  virtual int num_nodes() const { return 1; }
  virtual int node_rank() const { return 0; }
  bool is_global_zero() const { return global_rank() == 0; }

  /// In place over all ranks. Logged values of one step are reduced in ONE call per op. (collective)
  virtual void reduce_values(std::vector<double>& values, dist::ReduceOp op) {}
  /// Sums `t` (on the strategy's root device) over every process in place (sync_batchnorm's statistics).
  /// (collective)
  virtual void all_reduce_sum(Tensor& t) {}
  virtual void barrier(const std::string& name = "") {}
  /// (s...) -> (world, s...) in rank order; with one process the input comes back unchanged
  /// (docs/trainer_contract.md "all_gather"). sync_grads: the result carries gradients back to every rank's
  /// input (its backward is a collective too). (collective)
  virtual Tensor all_gather(const Tensor& t, bool sync_grads = false) { return t; }
  /// First dims may differ per rank (trailing dims must match): one tensor per rank, in rank order. (collective)
  virtual std::vector<Tensor> all_gather_uneven(const Tensor& t) { return {t}; }
  /// Makes a metric object's compute() global (installs its state-sync hook). One process: nothing.
  virtual void prepare_metric(metrics::Metric& metric) {}
  /// The value held by the lowest rank that has one, on every rank; nullopt when no rank has it. Monitoring
  /// callbacks use it so that a value logged on some ranks only (rank_zero_only, an empty shard) is agreed.
  /// (collective: two small collectives)
  std::optional<double> agreed_value(std::optional<double> local);
  /// Rank `src`'s value on every rank (rank_zero_only values that a callback monitors). (collective)
  virtual double broadcast_value(double value, int src = 0) { return value; }
  virtual std::string broadcast_string(const std::string& s, int src = 0) { return s; }
  /// Agreement on a boolean: all=true -> true only if every rank says true; all=false -> true if any does.
  /// Used for should_stop and checkpoint decisions. (collective)
  virtual bool reduce_decision(bool decision, bool all = false) { return decision; }
};

}  // namespace volt
