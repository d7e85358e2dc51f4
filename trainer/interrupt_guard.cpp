#include <volt/trainer/interrupt_guard.h>

#include <atomic>

#include <volt/runtime/error.h>

namespace volt {

namespace {

volatile std::sig_atomic_t g_signal = 0;
std::atomic<int> g_depth{0};  // nested fits (a fit inside a callback) share the outer guard

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    // Second signal: the user means it. Default action (terminate), re-raised now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  if (g_depth.fetch_add(1) != 0) return;
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes continue; the loop polls the flag
  if (sigaction(SIGINT, &sa, &old_int_) != 0 || sigaction(SIGTERM, &sa, &old_term_) != 0) {
    sigaction(SIGINT, &old_int_, nullptr);
    g_depth.fetch_sub(1);
    VOLT_FAIL("Trainer: cannot install the SIGINT/SIGTERM handlers for graceful interruption");
  }
  installed_ = true;
}

InterruptGuard::~InterruptGuard() {
  g_depth.fetch_sub(1);
  if (!installed_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int InterruptGuard::pending() { return g_signal; }

}  // namespace volt
