#pragma once
/// @file
/// FSDPStrategy: fully sharded data parallel (ZeRO stage 3). Each rank stores 1/world of every trainable
/// parameter; a unit's full parameters exist only while the unit runs. Written against the process-group
/// collectives, so CPU ranks over MPI and GPU ranks over NCCL run the same code.
///
/// @code{.unparsed}
///   mpirun -np 3 build/examples/mnist_mlp --strategy fsdp --fsdp-min-num-params 100000
///   TrainerOptions o; o.strategy = "fsdp"; o.fsdp_wrap = {"encoder", "decoder.l1"};
/// @endcode
///
/// Units (trainer/strategies/fsdp_wrap.h): wrapped submodules (by size, fsdp_min_num_params, and/or by name, fsdp_wrap),
/// plus the root unit with every trainable parameter left over. The layout is ZeroStrategy's (stage 2) with
/// buckets that never mix units: every bucket is flat, padded to world * chunk, rank r owns
/// [r * chunk, (r + 1) * chunk); the shards are the master copy the optimizers update (state for the shard only).
///
/// Memory: every parameter of a bucket is a view of ONE flat Storage of world * chunk values; between uses its
/// data is released (Storage::data reset, nbytes kept), so a rank holds its shards and nothing of full size.
/// Reading a released parameter is a volt::Error ("storage released: ...").
///
/// When (all collectives in program order, hence the same on every rank):
/// - forward: a unit is all-gathered when its module is called (nn::Module::call_scoped's call hook) and
///   freed when the call returns, with grad and without; the next unit in the previous step's forward order is
///   prefetched (a non-blocking all-gather) while this one computes. A unit called twice is gathered per call.
/// - backward: the nodes a unit's forward created (its range of Node::sequence_nr) re-gather it just before
///   the first of them runs (autograd::PreNodeHookGuard), prefetching the next unit in backward order; once all
///   its parameters' gradients are complete they are reduce-scattered into the shards' gradients (the
///   ShardedReducer stage-two path, overlapped with backward) and the full parameters are freed again.
/// - the root unit is gathered in module_step_begin() (before training_step, each validation/test/predict
///   step) and freed once its gradients are complete (automatic optimisation) or in module_step_end(); after
///   each optimizer step, units still gathered are re-gathered from the new shards.
/// Requirements: a wrapped module's parameters are read only inside its calls, and every call goes through
/// call_scoped (UnaryModule::operator() does); a unit's module is called on every rank alike (the gathers are
/// collectives). Parameters with requires_grad false are not sharded (each rank keeps them whole).
///
/// Gradient accumulation: non-stepping batches skip the reduction, and the full gradients accumulate in the
/// parameters' .grad (freed by the stepping batch's reduction). Clipping by norm takes the norm over all
/// shards; 16-mixed unscales the shard gradients. Checkpoints: module_state_dict() gathers the full layout DDP
/// writes (rank 0 writes it) and optimizer state is gathered as under ZeRO, so a run can resume under any
/// strategy and world size. Loading never gathers: each rank copies only its slice of every sharded parameter
/// into its shards (load_module_state_dict, load_module_from_file), so a resume holds this rank's shards plus one
/// tensor, not the full parameters. teardown() leaves the module with its full parameters (gathered) on every
/// rank.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <volt/nn/safetensors_reader.h>
#include <volt/trainer/strategies/fsdp_wrap.h>
#include <volt/trainer/strategies/zero.h>

namespace volt {

/// "fsdp", "fsdp_full_shard", "deepspeed_stage_3".
bool is_fsdp_strategy(const std::string& name);

class FSDPStrategy : public ZeroStrategy, private nn::CallHook {
 public:
  explicit FSDPStrategy(const DeviceSelection& devices, FsdpWrapPolicy policy = {});
  ~FSDPStrategy() override;

  std::string name() const override { return "fsdp"; }
  /// Takes effect at the next setup_optimizers (the Trainer sets it from its options).
  void set_wrap_policy(FsdpWrapPolicy policy) { policy_ = std::move(policy); }
  const FsdpWrapPolicy& wrap_policy() const { return policy_; }

  void setup_optimizers(std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) override;
  void backward(const Tensor& loss, bool sync_grad) override;
  void finish_gradient_sync() override;
  void after_optimizer_step(optim::Optimizer& optimizer) override;
  void module_step_begin() override;
  void module_step_end() override;
  /// Takes the module's fsdp_wrap_modules into the wrap policy and whether it optimises automatically.
  void bind(TrainModule& module) override;
  nn::StateDict module_state_dict(nn::Module& module) override;
  /// A full-layout state (strict: the checks and messages of nn::Module::load_state_dict), present on every
  /// rank: this rank's slice of each sharded parameter is copied into its shard, other tensors whole; no unit is
  /// gathered. Units gathered at the call are re-gathered from the new shards (collective only then).
  void load_module_state_dict(nn::Module& module, const nn::StateDict& sd) override;
  /// The same from a checkpoint file: `placeholders` (trainer/checkpoint/sharded_stream.h's zero_placeholder, or
  /// any tensors) give the names, shapes and dtypes that are checked; the values are read from `reader` under
  /// the same names, for a sharded parameter only the byte range of the slice this rank owns. Host memory: one
  /// slice at a time (plus, for a shard on a GPU, one slice-sized staging tensor).
  void load_module_from_file(nn::Module& module, const nn::StateDict& placeholders, nn::SafetensorsReader& reader);
  void teardown(nn::Module& module) override;
  void abandon(nn::Module& module) noexcept override;

  /// The units (wrapped submodules first, the root unit "" last), for tests and summaries.
  struct UnitInfo {
    std::string name;
    std::vector<std::string> params;
    std::vector<int> buckets;  ///< of sharded_reducer()
    int64_t numel = 0;         ///< unpadded
  };
  std::vector<UnitInfo> units() const;
  bool is_gathered(int unit) const;
  /// All-gathers issued so far (one per bucket gathered), for tests.
  int64_t gather_count() const { return gathers_; }

  /// RAII: every unit's full parameters for the scope (gathered on entry: a collective), and those it gathered
  /// freed again at exit. For reading or editing the whole model outside forward (summaries, custom saving);
  /// edits are copied into the shards at exit when `writeback` is true.
  class FullParams {
   public:
    explicit FullParams(FSDPStrategy& strategy, bool writeback = false);
    ~FullParams();
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;

   private:
    FSDPStrategy& s_;
    bool writeback_;
    std::vector<int> gathered_;
  };

 protected:
  int shard_unit(const std::string& param_name) const override;

 private:
  std::vector<std::string> module_wrap_;  ///< the bound module's fsdp_wrap_modules()
  bool automatic_optimization_ = true;     ///< the bound module's automatic_optimization
  struct BucketState {
    std::shared_ptr<Storage> storage;  ///< what the bucket's parameters view; data null while released
    Tensor full;                       ///< (world * chunk,) over storage
    std::shared_ptr<dist::Work> work;  ///< an all-gather in flight into `full`
  };
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;  ///< null for the root unit (no call hook)
    std::vector<std::string> params;
    std::vector<int> buckets;
    int64_t numel = 0;
    int depth = 0;                                        ///< calls in progress
    uint64_t range_start = 0;                             ///< sequence_nr at the outermost call's start
    std::vector<std::pair<uint64_t, uint64_t>> ranges;    ///< [start, end) of each call with grad, this step
    int pending = 0;                                      ///< parameters whose gradient is not complete yet
    int num_hooked = 0;
    int pinned = 0;  ///< FullParams scopes holding the unit gathered
  };

  void before_call(nn::Module& module) override;
  void after_call(nn::Module& module) override;
  void on_backward_node(const Node& node);
  void on_param_grad_ready(int unit);

  bool bucket_gathered(int b) const;
  void start_gather(int unit);  ///< allocates and launches the all-gathers of the unit's released buckets
  void wait_gather(int unit);   ///< completes the unit's in-flight all-gathers
  void gather(int unit) {
    start_gather(unit);
    wait_gather(unit);
  }
  void release(int unit);
  /// The checks of load_module_state_dict, then `fill(name, first, count, dst)` for every tensor of the module:
  /// elements [first, first + count) of the source tensor `name` (flattened) into `dst` (count,), or with
  /// count < 0 the whole tensor into `dst`, a tensor of its shape (fsdp_load.cpp).
  using SliceFill = std::function<void(const std::string& name, int64_t first, int64_t count, Tensor& dst)>;
  void load_module_sliced(nn::Module& module, const nn::StateDict& sd, const SliceFill& fill);
  /// Starts gathering the unit after `unit` in `order` (step +1: forward, -1: backward) if it will be needed.
  void prefetch_next(const std::vector<int>& order, int unit, int step);
  void build_units();
  void drop_units();  ///< gathers everything (collective) and removes the hooks
  void forget_units() noexcept;  ///< removes the hooks and the unit tables (local)

  FsdpWrapPolicy policy_;
  std::vector<Unit> units_;
  std::map<std::string, int> unit_of_param_;  ///< used by shard_unit while the layout is built
  std::map<const nn::Module*, int> unit_of_module_;
  std::vector<BucketState> bucket_state_;
  std::vector<std::pair<Tensor, int>> grad_hooks_;  ///< (parameter, hook id)
  std::vector<int> forward_order_, last_forward_order_;  ///< units by first call in this / the last step
  int root_ = -1;
  int64_t gathers_ = 0;
};

/// The factory the strategy registry (trainer/strategies/registry.cpp) uses for the FSDP names.
std::unique_ptr<Strategy> make_fsdp_strategy(const DeviceSelection& devices);

}  // namespace volt
