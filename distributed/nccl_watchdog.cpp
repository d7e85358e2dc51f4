#include <volt/distributed/nccl_watchdog.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

namespace volt::dist::nccl_watchdog {

Clock Clock::steady() {
  Clock c;
  c.now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  // A GPU collective completes in microseconds to milliseconds: yield first (the core may be shared with a
  // peer rank), then nap so that a long wait does not burn a core.
  c.pause = [](int n) {
    if (n < 2000) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 << std::min(n - 2000, 7))));
  };
  return c;
}

Outcome watch(const Probes& probes, double timeout_s, const std::function<void()>& abort, const Clock& clock) {
  const double start = clock.now();
  Outcome out;
  for (int n = 0;; ++n) {
    std::string err = probes.error ? probes.error() : std::string();
    if (!err.empty()) {
      out.kind = Outcome::Kind::Failed;
      out.error = std::move(err);
      break;
    }
    if (probes.done()) {
      out.elapsed_s = clock.now() - start;
      return out;
    }
    if (clock.now() - start >= timeout_s) {
      out.kind = Outcome::Kind::TimedOut;
      break;
    }
    clock.pause(n);
  }
  out.elapsed_s = clock.now() - start;
  if (abort) abort();
  out.aborted = true;
  return out;
}

std::string failure_message(const CollectiveInfo& info, int rank, int world_size, const std::string& nccl_error,
                            const std::string& peer_report) {
  std::ostringstream os;
  os << "collective " << info.op << " (sequence #" << info.seq << ") failed on rank " << rank << " of "
     << world_size << ": NCCL error: " << nccl_error
     << " (reported by ncclCommGetAsyncError: a peer rank may have died or its network failed); the NCCL "
        "communicator was aborted. "
     << (peer_report.empty() ? std::string() : peer_report + " ")
     << "The process group is now unusable: exit the process.";
  return os.str();
}

}  // namespace volt::dist::nccl_watchdog
