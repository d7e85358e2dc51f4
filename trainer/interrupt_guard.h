#pragma once
// Graceful interruption of Trainer::fit by SIGINT or SIGTERM.
//
// While an InterruptGuard lives, the first SIGINT/SIGTERM only records the signal (async-signal-safe: one
// sig_atomic_t store); the Trainer polls it at each training-step boundary, agrees with the other ranks, and
// stops cleanly (checkpoint, logger flush). A second signal restores the default action and re-raises, so
// the process exits at once as the shell expects. The previous handlers come back when the guard dies.
//
// A launcher (mpirun) that loses a rank sends the survivors SIGTERM and kills them about a second later; they
// would spend that second waiting for the dead rank in a collective and die without a word. So a watcher
// thread looks at the signal at once: when a rank of the default process group on this host has exited, it
// prints "rank R: SIGTERM received while rank X (pid P on HOST) is missing (exited); ..." to stderr and exits
// with 128 + signal. A rank on this host that is stopped (SIGSTOP, a debugger) at two looks 100 ms apart is
// named the same way, with its last collective and this rank's (distributed/peer_status.h): "rank R: SIGTERM
// received while rank X (pid P on HOST, process stopped, last collective #S OP) is stuck (this rank's last
// collective is #S' OP'); ...". With every peer alive and running, the signal takes the graceful path above.
#include <csignal>

namespace volt {

class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The first signal received since the guard was installed (SIGINT or SIGTERM), or 0.
  static int pending();
  // Asks for the same graceful stop from elsewhere (a preemption warning, trainer/callbacks/preemption.h):
  // records `sig` unless a signal is already pending. Async-signal-safe; no watcher, no second-signal rule. A
  // request made while no guard lives is dropped when the next guard is installed.
  static void request(int sig);

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  bool installed_ = false;
};

}  // namespace volt
