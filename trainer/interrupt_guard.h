#pragma once
// Graceful interruption of Trainer::fit by SIGINT or SIGTERM.
//
// While an InterruptGuard lives, the first SIGINT/SIGTERM only records the signal (async-signal-safe: one
// sig_atomic_t store); the Trainer polls it at each training-step boundary, agrees with the other ranks, and
// stops cleanly (checkpoint, logger flush). A second signal restores the default action and re-raises, so
// the process exits at once as the shell expects. The previous handlers come back when the guard dies.
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

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  bool installed_ = false;
};

}  // namespace volt
