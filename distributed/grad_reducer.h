#pragma once
/// @file
/// Bucketed data-parallel gradient averaging (the core of DDP), overlapped with backward.
///
/// Parameters are grouped into buckets of about `bucket_cap_bytes` in REVERSE registration order (backward
/// produces the last layers' gradients first). A grad-ready hook on each parameter copies its gradient into its
/// bucket's flat buffer (bucket_numel,); once every parameter of a bucket is ready, the bucket's all-reduce is
/// launched without blocking while backward continues. Buckets are launched strictly in bucket order on every
/// rank, so the collectives match even if parameters become ready in different orders on different ranks.
///
/// Use per optimisation step (every rank, same parameters, same order):
/// @code
///     reducer.broadcast_parameters(params_and_buffers);   // once, before training: rank 0's weights win
///     loss.backward();
///     reducer.finalize();        // waits for all buckets, writes grad = average over ranks into param.grad
///     optimizer.step();
/// @endcode
/// Gradient accumulation: steps under `auto guard = reducer.no_sync();` (or set_sync(false)) do no
/// communication; gradients accumulate locally in .grad, and the next synced backward reduces the sums.
///
/// A parameter that requires grad but receives none in a synced step is an error naming it (the other ranks
/// would wait for its bucket forever), unless Options::find_unused_parameters: then it contributes zeros and
/// its .grad is set to the average of the other ranks' gradients (zeros when all are unused). A parameter
/// whose requires_grad is off during the step (TrainModule::toggle_optimizer, the same on every rank) is not
/// "unused": it takes no part in the step, its share of its bucket is reduced as zeros, its .grad is left as it
/// was, and a bucket with nothing trainable left is not reduced.
///
/// Averaging: large (in-place) buckets are all-reduced with ReduceOp::Avg, so nothing touches .grad after the
/// collective; packed buckets use Avg where the backend fuses it (NCCL) and otherwise Sum, the division by the
/// world size riding on the copy out of the bucket. At world size 1 the reducer costs nothing: no bucket
/// buffers, copies, kernels or collectives; .grad is left as backward made it (same storage, same values).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <volt/distributed/process_group.h>

namespace volt::dist {

class GradReducer {
 public:
  struct Options {
    size_t bucket_cap_bytes = 25u << 20;
    bool find_unused_parameters = false;
    /// A parameter whose gradient alone is at least this large gets a bucket of its own, all-reduced in place
    /// in its .grad: no copy into a bucket buffer and none back out.
    size_t in_place_bytes = 256u << 10;
    /// Reduce packed buckets with ReduceOp::Avg (true) or with Sum and the division on the copy out (false);
    /// unset: Avg exactly where the backend fuses it (ProcessGroup::avg_is_fused). Results agree to rounding.
    std::optional<bool> packed_avg;
  };
  using NamedParams = std::vector<std::pair<std::string, Tensor>>;

  /// Registers grad-ready hooks on every parameter that requires grad. All parameters of one bucket share a
  /// dtype and device (a change starts a new bucket).
  GradReducer(ProcessGroup& group, NamedParams params, Options options);
  GradReducer(ProcessGroup& group, NamedParams params) : GradReducer(group, std::move(params), Options{}) {}
  ~GradReducer();  ///< removes the hooks
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  /// Waits for every bucket (launching the rest), averages, writes param.grad. A no-op when sync is off.
  void finalize();

  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }
  /// RAII scope with sync off (restores the previous setting).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(GradReducer& r) : r_(r), prev_(r.sync()) { r.set_sync(false); }
    ~NoSyncGuard() { r_.set_sync(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
   private:
    GradReducer& r_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Time finalize() spent waiting for the gradient collectives, over the synced steps that communicated
  /// (world size > 1; steps under no_sync and one-process steps wait for nothing and are not counted, nor is a
  /// step that fails). With several ranks, a rank that finishes backward first waits here for the last one as
  /// well as for the collective: the wait of the last rank to arrive is the part of the collective not hidden
  /// behind backward (with the backend's own follow-up, e.g. MPI's division for Avg; on a GPU the wait also
  /// covers the device finishing the queued backward), and the spread between ranks is their skew (bench_train
  /// reports both under --strategy ddp). Under VOLT_DISTRIBUTED_DEBUG the check before each collective already
  /// waits for every rank when the bucket is launched during backward, so the skew shows there, not here.
  struct WaitStats {
    int64_t steps = 0;        ///< synced steps whose collectives were waited for
    double seconds = 0;       ///< their total wait
    double last_seconds = 0;  ///< the latest such step's wait
  };
  const WaitStats& wait_stats() const { return wait_stats_; }

  /// Bucket layout, for logging and tests: the parameter names of each bucket in launch order.
  std::vector<std::vector<std::string>> bucket_names() const;
  int64_t buckets_launched_during_backward() const { return launched_in_backward_; }

 private:
  struct Slot {
    std::string name;
    Tensor param;
    int bucket = 0;
    int64_t offset = 0;  ///< in elements, into the bucket buffer
    int hook = -1;
    bool ready = false;
    bool frozen = false;  ///< requires_grad off for this step (toggle_optimizer): no gradient, not waited for
  };
  struct Bucket {
    std::vector<int> slots;
    Tensor flat;  ///< (numel,) dtype/device of its parameters; in-place buckets: the parameter's .grad itself
    int pending = 0;
    bool in_place = false;
    bool averaged = false;  ///< reduced with ReduceOp::Avg (else Sum, divided by the world size in finalize)
    std::shared_ptr<Work> work;
  };
  void on_grad_ready(int slot);
  void launch_ready_buckets();
  void reset_step();
  /// At the first gradient of a synced step (or in finalize if none came): freezes the slots whose parameter
  /// has requires_grad off now; a bucket frozen whole is not reduced.
  void begin_step();
  bool step_open_ = false;
  void finalize_single();
  [[noreturn]] void fail_unused(const std::vector<std::string>& unused);

  ProcessGroup& group_;
  Options options_;
  bool single_;     ///< world size 1: gradients are left exactly as backward made them (no buffers, no kernels)
  bool packed_avg_;  ///< packed buckets use Avg (Options::packed_avg, by default ProcessGroup::avg_is_fused)
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool in_finalize_ = false;
  int64_t launched_in_backward_ = 0;
  WaitStats wait_stats_;
};

/// Copies rank `root`'s values of `tensors` (parameters and buffers, same order on every rank) to all ranks,
/// so every replica starts identical. One coalesced collective per dtype.
void broadcast_parameters(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

}  // namespace volt::dist
