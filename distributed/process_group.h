#pragma once
/// @file
/// Process groups: the collectives every rank of a data-parallel job calls on tensors.
///
/// Backends (one per job, chosen by init_process_group):
/// @code
///   "mpi"    CPU tensors; MPI non-blocking collectives polled with MPI_Test so that a timeout can fire.
///   "nccl"   CUDA tensors; NCCL on the device's comm stream, ordered after the compute stream by events;
///            bootstrapped over MPI (the ncclUniqueId is broadcast with MPI_Bcast).
///   "single" world size 1: every collective is the identity (all_gather adds a leading dim of 1).
/// @endcode
///
/// Contract shared by all collectives:
///   * EVERY rank of the group must call the same collectives in the same order with matching dtypes and
///     shapes (all_gather_uneven: matching dtypes and numbers of dimensions). Each call carries a sequence number.
///   * Debug mode (env VOLT_DISTRIBUTED_DEBUG=1 or set_debug(true)): before each collective the ranks exchange
///     (sequence number, op, dtype, shape, root); any difference throws volt::Error on EVERY rank, listing each
///     rank's call, instead of corrupting data or hanging.
///   * Timeout (env VOLT_COLLECTIVE_TIMEOUT in seconds, default 300, or set_timeout()): a collective that does
///     not complete in time throws volt::Error on the waiting ranks naming the collective and its sequence
///     number, the ranks on this host that are behind (pid, host, whether stopped or exited) and the last
///     collective each of them entered (a shared-memory flight recorder that needs nothing from them). The
///     group is then BROKEN: later collectives throw at once, and finalize_process_group() ends the job with
///     MPI_Abort (a timed-out MPI request can never be cancelled, so MPI_Finalize could hang).
///     Catch the error, report it, and exit; do not continue training. A broken group that is not the default
///     one (made with make_mpi_group) is simply destroyed without freeing its communicators, so the other ranks
///     and MPI_Finalize are unaffected (used by the tests).
///   * Tensors may be non-contiguous; in-place collectives write the result back into the given view.
///     f16/bf16 reductions over MPI are computed in f32 (exact for Min/Max, one rounding for Sum/Avg).
///   * Avg needs a floating dtype.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt::dist {

class FlightRecorder;

enum class ReduceOp { Sum, Avg, Min, Max };
const char* reduce_op_name(ReduceOp op);

/// Identity of one collective call, used in debug checks and error messages.
struct CollectiveInfo {
  std::string op;   ///< "all_reduce", "broadcast", ...
  uint64_t seq = 0;  ///< per-group sequence number (1 for the first collective)
};

/// A launched collective. wait() blocks (polling, so the group's timeout applies) until the result is in the
/// caller's tensor. For NCCL, wait() only orders the compute stream after the collective (no host sync).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  virtual void wait() = 0;
  const CollectiveInfo& info() const { return info_; }

 protected:
  CollectiveInfo info_;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int world_size, int local_rank, int local_world_size);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }            // rank among the processes on this node
  int local_world_size() const { return local_world_size_; }
  bool is_main() const { return rank_ == 0; }
  virtual std::string backend_name() const = 0;

  /// Seconds a collective may take before it is declared hung (default from VOLT_COLLECTIVE_TIMEOUT or 300).
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_; }
  void set_debug(bool on) { debug_ = on; }
  bool debug() const { return debug_; }
  uint64_t sequence_number() const { return seq_; }  // collectives issued so far
  bool broken() const { return !broken_reason_.empty(); }

  /// Process id and host of every rank, learned when the group is made (empty for groups that could not):
  /// failure reports name the ranks that are gone.
  struct PeerIdentity {
    int64_t pid = 0;
    std::string host;
  };
  const std::vector<PeerIdentity>& peers() const { return peers_; }
  /// For a timeout report: which ranks on this host have exited (their process is gone or a zombie), or that
  /// all of them are alive; ranks on other hosts cannot be checked from here and are said to be unchecked.
  std::string peer_liveness_report() const;
  /// The ranks on this host whose process has exited (gone, or a zombie), each described as
  /// "rank <r> (pid <pid> on <host>)". Reads only what the group learned when it was made and /proc, so it is
  /// safe to call from another thread while this one is blocked in a collective.
  std::vector<std::string> missing_peers() const;
  /// peers()' host names, by rank.
  std::vector<std::string> hosts() const;

  // ---- collectives (every rank must call) ---------------------------------------------------------------
  /// In place: every rank ends with the reduction of all ranks' `t`.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  /// Launches the reduction and returns at once (CPU: MPI_Iallreduce; CUDA: enqueued on the comm stream).
  /// `t` must stay alive and untouched until wait().
  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
  /// Reduces many tensors (any shapes, same device) in ONE collective by packing them into one flat buffer.
  /// Mixed dtypes are packed as f64 (exact for f32 and integers below 2^53) and cast back.
  void all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);
  /// In place: every rank ends with `root`'s tensor.
  void broadcast(Tensor& t, int root = 0);
  /// Equal shapes (s...) on every rank -> (world, s...) in rank order. Different dtypes or shapes are a
  /// volt::Error on every rank naming each rank's shape (a small host-side exchange first, also without debug).
  Tensor all_gather(const Tensor& t);
  /// all_gather into a preallocated buffer, launched without blocking: `in` (n,) contiguous, `out` (world * n,)
  /// contiguous on the same device and dtype; rank r's `in` lands in out[r * n, (r + 1) * n) after wait().
  /// Both must stay alive and untouched until then. The shapes are not exchanged first: every rank must pass
  /// the same n (FSDP's fixed shard layout).
  std::shared_ptr<Work> all_gather_into_async(const Tensor& in, Tensor& out);
  /// all_gather that gradients flow back through (upstream's `all_gather(..., sync_grads=True)`): the result
  /// requires grad when `t` does, and its backward hands each rank the sum over ranks of the gradients that
  /// reached this rank's slice (an all_reduce of the incoming gradient, then this rank's row). The backward
  /// is a collective too: every rank must run a backward that reaches it. The group must outlive the graph.
  Tensor all_gather_with_grad(const Tensor& t);
  /// Any shapes with the same dtype and number of dimensions: every rank's full shape is exchanged first, each
  /// rank pads its tensor with zeros to the largest size in every dimension, one all_gather moves the padded
  /// tensors and each is trimmed back to its rank's shape (rank r holding ones(r + 1, 2 - r) works). Returns one
  /// contiguous tensor per rank, in rank order. Scalars behave like all_gather.
  std::vector<Tensor> all_gather_uneven(const Tensor& t);
  /// all_gather_uneven concatenated along dim 0 (the dims after the first must match on every rank); `sizes`
  /// (if given) receives each rank's first dim.
  Tensor all_gather_cat(const Tensor& t, std::vector<int64_t>* sizes = nullptr);
  /// `t` of shape (world * n, s...) -> this rank's block (n, s...) of the reduction over ranks.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  /// Launches reduce_scatter and returns at once: `out` (n, s...), contiguous and preallocated on `t`'s device
  /// and dtype, holds this rank's block after wait(). `t` and `out` must stay alive and untouched until then.
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& t, Tensor& out, ReduceOp op = ReduceOp::Sum);
  void barrier();
  /// Barrier among the processes of this node only (used by SharedTensor).
  virtual void local_barrier() = 0;

  /// Called by finalize_process_group(); MPI_Abort when broken (see above).
  virtual void shutdown() {}

  /// The device this group's collectives take tensors on: the CPU for the MPI and single backends; for NCCL the
  /// GPU of its communicator (set by use_device() or by the first device collective; until then the default
  /// cuda:(local_rank % device count)).
  virtual Device device() const { return kCPU; }
  /// Binds an NCCL group to `device` (the GPU a strategy chose for this rank) before its communicator exists;
  /// an error once it exists on another GPU. Other backends only check that they take tensors on `device` (MPI:
  /// the CPU; single: any device).
  virtual void use_device(Device device);

  /// True when all_reduce with ReduceOp::Avg costs no more than Sum because the division happens inside the
  /// collective (NCCL's ncclAvg); false when the backend divides in a separate pass after the sum (MPI), so a
  /// caller that makes a pass over the result anyway (a copy out) is better off summing and scaling there.
  virtual bool avg_is_fused() const { return false; }

 protected:
  virtual bool supports_device(Device d) const = 0;
  /// Backends receive contiguous tensors on their device; `result` tensors are preallocated by the caller.
  virtual std::shared_ptr<Work> all_reduce_impl(Tensor& t, ReduceOp op, const CollectiveInfo& info) = 0;
  virtual std::shared_ptr<Work> broadcast_impl(Tensor& t, int root, const CollectiveInfo& info) = 0;
  virtual std::shared_ptr<Work> all_gather_impl(const Tensor& in, Tensor& out, const CollectiveInfo& info) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_impl(const Tensor& in, Tensor& out, ReduceOp op,
                                                    const CollectiveInfo& info) = 0;
  virtual std::shared_ptr<Work> barrier_impl(const CollectiveInfo& info) = 0;
  /// Host-side all-gather of a fixed-size record per rank (debug checks); blocking, honours the timeout.
  virtual std::vector<int64_t> exchange_records(const std::vector<int64_t>& mine, const CollectiveInfo& info) = 0;

  /// Marks the group broken and returns the error text for a timeout of `info` after `elapsed` seconds.
  std::string timeout_message(const CollectiveInfo& info, double elapsed);
  void mark_broken(const std::string& reason) { if (broken_reason_.empty()) broken_reason_ = reason; }
  /// Records every rank's identity, and opens this host's flight-recorder table (flight_recorder.h) so that a
  /// timeout can name the rank that is behind and its last collective. Every rank calls it, in the same order
  /// for every group it makes.
  void set_peers(std::vector<PeerIdentity> peers);
  /// This process as a fixed-size record (pid, host name) for exchange_records, and the decoding of every
  /// rank's record.
  static std::vector<int64_t> identity_record();
  static std::vector<PeerIdentity> decode_identities(const std::vector<int64_t>& all, int world_size);

 private:
  CollectiveInfo begin(const char* op, const Tensor* t, int root = -1, bool uneven = false);
  /// all_reduce and all_reduce_async without a trace range (each caller opens its own, so one call is one row).
  std::shared_ptr<Work> start_all_reduce(Tensor& t, ReduceOp op);
  std::shared_ptr<Work> start_reduce_scatter(const Tensor& t, Tensor& out, ReduceOp op);
  /// Every rank's shape (a small host-side exchange); a volt::Error on every rank when dtypes or numbers of
  /// dimensions differ, or (without `any_shape`) when the shapes do.
  std::vector<Shape> exchange_shapes(const char* op, const Tensor& t, bool any_shape, const CollectiveInfo& info);
  /// The data collective of all_gather: contiguous `in` (s...) from every rank -> (world, s...).
  Tensor gather_stacked(const Tensor& in, const CollectiveInfo& info);
  void check_usable(const char* op, const Tensor& t) const;

  int rank_, world_size_, local_rank_, local_world_size_;
  double timeout_s_ = 300.0;
  bool debug_ = false;
  uint64_t seq_ = 0;
  std::string broken_reason_;
  std::vector<PeerIdentity> peers_;
  std::shared_ptr<FlightRecorder> recorder_;  ///< null for one rank or without shared memory
};

/// Polls `done` with a short back-off until it returns true or `timeout_s` passes; returns false on timeout.
bool poll_until(const std::function<bool()>& done, double timeout_s);

// ---- launch environment -------------------------------------------------------------------------------------
struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string source;  ///< "OMPI", "PMI", "SLURM" or "none"
};
/// Reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}, then PMI_RANK/PMI_SIZE (+MPI_LOCALRANKID), then
/// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Without any of them: one process.
LaunchEnv detect_launch_env();
/// The GPU a rank should use: cuda:(local_rank % device count), or the CPU when CUDA is unavailable.
Device device_for_local_rank(int local_rank);

// ---- default group --------------------------------------------------------------------------------------------
/// backend: "auto" (nccl when the launch has several ranks and CUDA is available, else mpi when several ranks,
/// else single), "mpi", "nccl" or "single". Initialises MPI (MPI_THREAD_FUNNELED) if needed. Throws if a group
/// already exists. `timeout_s` < 0 keeps the environment default.
ProcessGroup& init_process_group(const std::string& backend = "auto", double timeout_s = -1);
bool is_initialized();
ProcessGroup& default_group();  ///< throws when not initialised
/// Destroys the default group; finalises MPI if Volt initialised it. Calls MPI_Abort if the group is broken.
void finalize_process_group();

/// Factories (also usable without the default group). make_mpi_group/make_nccl_group throw when Volt was built
/// without MPI / CUDA.
std::unique_ptr<ProcessGroup> make_single_group();
std::unique_ptr<ProcessGroup> make_mpi_group();
std::unique_ptr<ProcessGroup> make_nccl_group();

}  // namespace volt::dist
