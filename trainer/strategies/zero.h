#pragma once
/// @file
/// ZeroStrategy: data-parallel training with sharded optimizer state (ZeRO stage 1) and sharded gradients
/// (stage 2), written against the process-group collectives only (all_reduce, reduce_scatter, all_gather,
/// broadcast), so CPU ranks over MPI and GPU ranks over NCCL run the same code.
///
/// @code{.unparsed}
///   mpirun -np 3 build/examples/mnist_mlp --strategy zero2        # also deepspeed_stage_2, ddp_sharded
///   mpirun -np 2 build/examples/mnist_mlp --strategy zero1        # also deepspeed_stage_1
/// @endcode
///
/// Everything DDPStrategy does for processes, devices, loaders and metrics is the same. What differs:
/// - setup_optimizers(): the trainable parameters are laid out flat in buckets (dist::ShardedReducer: reverse
///   registration order, one optimizer parameter group per bucket, padded to a multiple of the world size) and
///   each rank owns a contiguous 1/world slice of every bucket. Each optimizer's parameter groups are rewritten
///   to hold this rank's flat shard tensors (one per bucket) instead of the parameters, so the optimizer
///   allocates state only for its shard, and its step updates only that shard. Learning-rate schedulers, the
///   grad scaler and hyper-parameters keep working on the same optimizer objects.
/// - backward(): as gradients become ready, buckets are reduced without blocking: stage 2 reduce-scatters them
///   (average) into each rank's shard gradient; stage 1 all-reduces them and keeps this rank's slice. Either
///   way the parameters' full .grad is released once copied, so after a synced backward the parameters have no
///   .grad (hooks such as on_before_optimizer_step see the optimizer's shard gradients instead).
/// - after each optimizer step the updated shards are all-gathered into the parameters.
/// - clipping by norm uses the norm over all ranks' shards (one all_reduce of a scalar); by value is local.
/// - checkpoints hold the optimizer state in the full layout DDP writes (gathered on every rank, written by
///   rank 0), and load from any such checkpoint: a run may change strategy and world size when it resumes.
///   With checkpoint_layout = sharded each rank writes its own shards instead (trainer/checkpoint/sharded.h);
///   such a checkpoint loads directly at the same layout, and is consolidated in memory otherwise.
/// - toggle_optimizer works: a parameter toggled off gets no gradient in that backward, and the reducer skips
///   it (a bucket with nothing trainable is not reduced, and its shard gradient is left as it was).
/// - teardown() gives each optimizer its parameters back; the sharded optimizer state is dropped then (save a
///   checkpoint to keep it).
/// Parameters that require grad must each belong to one optimizer (a ZeRO rank keeps no gradient an optimizer
/// would not step); parameters with requires_grad false are neither sharded nor synchronised.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/distributed/sharded_reducer.h>
#include <volt/trainer/strategies/ddp.h>

namespace volt {

enum class ZeroStage { one = 1, two = 2 };

/// "<kind>.<g>.<i>.<name>": an optimizer's full-layout state keys ("state": group g, parameter i) and the
/// sharded checkpoint's flat keys ("flat": group g, bucket i).
std::string optimizer_slot_key(const char* kind, size_t g, size_t i, const std::string& name);

/// "zero1"/"deepspeed_stage_1" -> one; "zero2"/"deepspeed_stage_2"/"ddp_sharded" -> two; nullopt otherwise.
std::optional<ZeroStage> parse_zero_strategy(const std::string& name);

class ZeroStrategy : public DDPStrategy {
 public:
  ZeroStrategy(const DeviceSelection& devices, ZeroStage stage);
  ~ZeroStrategy() override;

  std::string name() const override { return stage_ == ZeroStage::one ? "zero1" : "zero2"; }
  ZeroStage stage() const { return stage_; }

  void setup(nn::Module& module) override;
  void setup_optimizers(std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) override;
  void backward(const Tensor& loss, bool sync_grad) override;
  void finish_gradient_sync() override;
  void after_optimizer_step(optim::Optimizer& optimizer) override;
  Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) override;
  void discard_gradients() override;
  OptimizerState optimizer_state(const optim::Optimizer& optimizer) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& sd) override;
  void load_optimizer_hyper_state(optim::Optimizer& optimizer, const std::map<std::string, double>& hs) override;
  void teardown(nn::Module& module) override;
  // Sharded checkpoints and toggle_optimizer (trainer/strategies/zero_checkpoint.cpp): each bucket of an optimizer
  // group is a flat buffer "flat.<group>.<j>.<state name>" whose slots are the full-layout keys
  // "state.<group>.<index>.<state name>" of its parameters.
  bool shards_optimizer_state() const override { return true; }
  ShardedOptimizerState sharded_optimizer_state(const optim::Optimizer& optimizer) override;
  bool matches_sharded_layout(const optim::Optimizer& optimizer, const std::vector<FlatShard>& flats) override;
  void load_sharded_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& replicated,
                                    const std::vector<FlatShard>& flats) override;
  std::vector<Tensor> optimizer_parameters(const optim::Optimizer& optimizer) override;

  /// The layout, for tests and benchmarks (null before setup_optimizers).
  const dist::ShardedReducer* sharded_reducer() const { return reducer_.get(); }

 protected:
  /// Buckets never mix two units: FSDP returns the index of the unit a parameter belongs to (ZeRO: 0).
  virtual int shard_unit(const std::string& param_name) const { return 0; }
  /// The unit (shard_unit) and the optimizer (index in setup_optimizers' list) of bucket b's parameters.
  int unit_of_bucket(int b) const;
  int optimizer_of_bucket(int b) const;
  nn::Module* module() const { return module_; }
  dist::ShardedReducer* reducer() { return reducer_.get(); }
  /// The buckets whose shards optimizer `o` steps (empty when ZeRO does not manage it).
  std::vector<int> buckets_of(const optim::Optimizer& o);

 private:
  /// One optimizer under sharding: its original parameter lists, and for each group the buckets whose shards
  /// replace them (shard j of group g is bucket buckets[g][j]) with each bucket slot's index in the group.
  struct Managed {
    std::shared_ptr<optim::Optimizer> optimizer;
    std::vector<std::vector<Tensor>> original;
    std::vector<std::vector<int>> buckets;
  };
  Managed* managed(const optim::Optimizer& o);
  /// The layout of bucket j of group g of `m`'s optimizer for state `state_name` (no tensor).
  FlatShard flat_layout(const Managed& m, size_t g, size_t j, const std::string& state_name) const;
  void restore_optimizers();

  ZeroStage stage_;
  nn::Module* module_ = nullptr;
  std::unique_ptr<dist::ShardedReducer> reducer_;
  std::vector<Managed> managed_;
  std::vector<std::vector<int>> slot_index_;  ///< per bucket, per slot: the parameter's index in its group
  struct OwnerKey {
    int optimizer, group, unit;
  };
  std::vector<OwnerKey> owners_;  ///< the reducer's owner keys
};

std::unique_ptr<Strategy> make_zero_strategy(const DeviceSelection& devices, ZeroStage stage);

}  // namespace volt
