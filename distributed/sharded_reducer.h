#pragma once
/// @file
/// ShardedReducer: the flat, sharded parameter layout of ZeRO stages 1 and 2, and its gradient reduction.
///
/// Layout. Parameters (those that require grad) are cut into buckets of about `bucket_cap_bytes` in REVERSE
/// registration order, as the DDP reducer does, never mixing two owner keys (an optimizer's parameter group),
/// dtypes or devices in one bucket; a parameter of at least `in_place_bytes` has a bucket of its own. A bucket is the flat concatenation of its parameters, (numel,), padded with
/// zeros to (world * chunk,) with chunk = ceil(numel / world); rank r owns the contiguous slice
/// [r * chunk, (r + 1) * chunk) of every bucket. A model below the bucket cap (one owner key, one dtype) is one
/// bucket, so each rank owns one contiguous 1/world of all its parameters.
///
/// Each bucket has a `shard` (chunk,): this rank's slice of the parameter values (padding: zeros), the tensor an
/// optimizer updates in place of the parameters. After finalize() its .grad holds this rank's slice of the gradient
/// averaged over ranks; gather_parameters() then all-gathers the updated shards into the full parameters.
///
/// Reduction, overlapped with backward: a grad-ready hook copies each parameter's gradient into its bucket's
/// flat buffer and releases the parameter's .grad; once a bucket is complete, it is launched without blocking
/// (buckets strictly in bucket order on every rank):
/// @code
///   Stage::one  all_reduce(Avg) of the bucket, then this rank's slice is copied into shard.grad;
///   Stage::two  reduce_scatter(Avg) straight into shard.grad: no rank ever holds the averaged full gradient.
/// @endcode
/// A bucket's buffer lives only from its first gradient until its reduction is seen to be done (the in-flight
/// buckets are tested as later gradients arrive, and waited for in finalize()); between steps a rank keeps its
/// shards, their gradients, and nothing of full size but the parameters themselves.
///
/// Toggled-off parameters: a parameter whose requires_grad is off during a synced step (toggle_optimizer on
/// another optimizer) receives no gradient and is not waited for. Its slice of a bucket is reduced as zeros; a
/// bucket with no trainable parameter left is not reduced at all and its shard keeps the gradient it had. Every
/// rank toggles the same optimizer, so every rank skips the same buckets.
///
/// Gradient accumulation: with sync off the hooks do nothing and gradients accumulate in the parameters' .grad
/// as usual; the next synced backward reduces the sums (and releases them).
///
/// Every method marked (collective) must be called by every rank in the same order. At world size 1 the
/// collectives are the identity and the layout is one unpadded shard per bucket.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <volt/distributed/process_group.h>

namespace volt::dist {

class ShardedReducer {
 public:
  enum class Stage { one, two };
  struct Options {
    size_t bucket_cap_bytes = 25u << 20;
    /// A parameter at least this large gets a bucket of its own; when the world size divides its size, its
    /// gradient is reduced in place (no copy into a bucket buffer, no padding).
    size_t in_place_bytes = 256u << 10;
  };
  struct Param {
    std::string name;
    Tensor param;
    int owner = 0;  ///< buckets never mix owners (the caller's key: an optimizer's parameter group)
  };
  struct Slot {
    std::string name;
    Tensor param;
    int bucket = 0;
    int64_t offset = 0;  ///< in elements, into the bucket's flat layout
    int hook = -1;
    bool ready = false;
    bool frozen = false;  ///< requires_grad off for this step (toggled off): no gradient, not waited for
  };
  struct Bucket {
    int owner = 0;
    std::vector<int> slots;  ///< indices into slots(), in flat layout order
    int64_t numel = 0;       ///< unpadded
    int64_t chunk = 0;       ///< this rank's share: numel rounded up to a multiple of the world size, / world
    Tensor shard;            ///< (chunk,) this rank's slice of the parameter values
    Tensor flat;             ///< (world * chunk,) gradient buffer, from the bucket's first gradient to its reduction
    Tensor reduced;          ///< (chunk,) this rank's slice of the averaged gradient, once reduced
    int pending = 0;
    bool in_place = false;   ///< one parameter whose gradient is the buffer itself
    std::shared_ptr<Work> work;
  };

  /// Registers grad-ready hooks and copies this rank's slices of the current parameter values into the shards
  /// (so the parameters must already be equal on every rank).
  ShardedReducer(ProcessGroup& group, std::vector<Param> params, Stage stage, Options options);
  ShardedReducer(ProcessGroup& group, std::vector<Param> params, Stage stage)
      : ShardedReducer(group, std::move(params), stage, Options{}) {}
  ~ShardedReducer();  ///< removes the hooks
  ShardedReducer(const ShardedReducer&) = delete;
  ShardedReducer& operator=(const ShardedReducer&) = delete;

  Stage stage() const { return stage_; }
  int world_size() const { return world_; }
  int rank() const { return rank_; }
  const std::vector<Slot>& slots() const { return slots_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  /// Waits for every bucket and sets each shard's .grad to its slice of the averaged gradient. A parameter that
  /// received no gradient in a synced step is an error naming it. A no-op when sync is off. (collective)
  void finalize();
  /// Copies this rank's slices of the current parameter values into the shards (local, no communication): the
  /// parameters are the source of truth between steps (a checkpoint load, a callback that edits weights), so
  /// the owner of a strategy calls this before each optimizer step.
  void refresh_shards();
  /// All-gathers bucket b's shard into its parameters. (collective)
  void gather_parameters(int bucket);
  /// Drops every gradient: the parameters' accumulated .grad and the shards' .grad (a lost accumulation window).
  void discard_gradients();

  /// A (chunk,) tensor laid out like bucket b's shard (optimizer state), gathered from every rank into the flat,
  /// unpadded (numel,) layout of the bucket. (collective)
  Tensor gather_flat(int bucket, const Tensor& shard_like) const;
  /// This rank's (chunk,) slice of a (numel,) tensor in bucket b's flat layout, zero-padded.
  Tensor slice_flat(int bucket, const Tensor& flat) const;

 private:
  void on_grad_ready(int slot);
  void launch_ready_buckets();
  /// Once b's collective is done (wait: block until it is), keeps this rank's slice of the result in b.reduced
  /// and releases the full-size buffer.
  void harvest(Bucket& b, bool wait);
  void reset_step();
  /// At the first gradient of a synced step (or in finalize if none came): slots whose parameter has
  /// requires_grad off now (TrainModule::toggle_optimizer) are frozen for this step.
  void begin_step();
  bool step_open_ = false;

  ProcessGroup& group_;
  Stage stage_;
  int world_, rank_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool sync_ = true;
};

}  // namespace volt::dist
