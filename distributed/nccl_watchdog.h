#pragma once
// Internal (not part of the public API): how the NCCL backend waits, without NCCL.
//
// NCCL runs its communicators non-blocking (config.blocking = 0): creating one, enqueueing a collective and the
// collective itself all return at once, and the host watches them. One rule decides every such wait, so that a
// dead or stuck peer ends each of them the same way: poll "finished?" and "did NCCL report an error?" with the
// group's collective timeout; on an error or a timeout abort the communicator (ncclCommAbort, which frees the
// GPU stream a dead peer would hold forever) exactly once, and report what happened. The rule is written here
// against plain callbacks so that it is tested on any machine (tests/distributed/test_nccl_watchdog.cpp);
// process_group_nccl.cpp binds the callbacks to ncclCommGetAsyncError, cudaEventQuery and ncclCommAbort.
#include <functional>
#include <string>

#include <volt/distributed/process_group.h>

namespace volt::dist::nccl_watchdog {

/// The two looks at a watched operation.
struct Probes {
  /// The operation finished (the communicator is ready; the collective's completion event fired).
  std::function<bool()> done;
  /// What NCCL reported asynchronously (ncclCommGetAsyncError: neither ncclSuccess nor ncclInProgress), or "".
  std::function<std::string()> error;
};

/// Time as the watch sees it: seconds from any origin, and a pause before the n-th re-poll (n = 0, 1, ...).
/// steady() is the real clock: about 50 ms of yields, then naps growing to 1 ms.
struct Clock {
  std::function<double()> now;
  std::function<void(int)> pause;
  static Clock steady();
};

struct Outcome {
  enum class Kind { Done, Failed, TimedOut };
  Kind kind = Kind::Done;
  std::string error;     ///< Failed: what NCCL reported
  double elapsed_s = 0;  ///< from the start of the watch to its decision
  bool aborted = false;  ///< `abort` ran (always, unless Done)
};

/// Polls `probes` until the operation is done, NCCL reports an error or `timeout_s` seconds pass. The error is
/// looked at first: an error NCCL reports poisons the whole communicator, so it fails the watch even when this
/// operation's event fired too. On an error or a timeout `abort` runs once before the watch returns; on success
/// never. `probes` are always looked at once, even with a timeout already spent.
Outcome watch(const Probes& probes, double timeout_s, const std::function<void()>& abort,
              const Clock& clock = Clock::steady());

/// The volt::Error text for an operation that NCCL failed (Outcome::Kind::Failed), in the form of the MPI
/// backend's failure: the collective and its sequence number, this rank, NCCL's error, then `peer_report` (who
/// has exited, who is stuck and where: ProcessGroup::peer_liveness_report() and the flight recorder's report).
std::string failure_message(const CollectiveInfo& info, int rank, int world_size, const std::string& nccl_error,
                            const std::string& peer_report);

}  // namespace volt::dist::nccl_watchdog
