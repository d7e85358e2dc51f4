#include <volt/trainer/interrupt_guard.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <volt/distributed/peer_status.h>
#include <volt/distributed/process_group.h>
#include <volt/runtime/error.h>

namespace volt {

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_watching = 0;  // the watcher is looking at the first signal
std::atomic<int> g_depth{0};  // nested fits (a fit inside a callback) share the outer guard
int g_pipe[2] = {-1, -1};     // the handler writes the signal number, the watcher reads it; 0 stops the watcher
std::thread g_watcher;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    // A launcher tearing a job down may send SIGTERM twice in a row: while the watcher still decides about
    // the first (a fraction of a second), a second one waits for its verdict.
    if (g_watching) return;
    // Second signal: the user means it. Default action (terminate), re-raised now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  if (g_pipe[1] >= 0) {
    const char c = static_cast<char>(sig);
    const int saved = errno;
    g_watching = 1;
    if (::write(g_pipe[1], &c, 1) != 1) g_watching = 0;
    errno = saved;
  }
}

void write_all(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(STDERR_FILENO, s.data() + off, s.size() - off);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) off += static_cast<size_t>(n);
  }
}

// A launcher tears a job down after one of its ranks died by sending the survivors SIGTERM: the graceful path
// would wait for the dead rank in its next collective until the launcher kills the survivors, with no word of
// why. If a peer on this host has exited, say which (rank, pid, host) and exit with 128 + signal (half a second
// later, unless the launcher's SIGKILL comes first). A peer that is stopped (SIGSTOP, a debugger) cannot reach
// the step boundary either: if it stays stopped for two looks 100 ms apart (a launcher that ends a job
// continues its stopped processes first), name it and its last collective and exit the same way. A signal
// while every peer is alive and running (a scheduler stopping the whole job) is left to the graceful path.
void exit_naming(const dist::ProcessGroup& g, int sig, const std::vector<std::string>& peers, const char* what) {
  std::string list;
  for (size_t i = 0; i < peers.size(); ++i) list += (i ? ", " : "") + peers[i];
  write_all("rank " + std::to_string(g.rank()) + ": " + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + " received while " +
            list + (peers.size() == 1 ? " is" : " are") + " " + what + "; exiting now (code " +
            std::to_string(128 + sig) + ") instead of waiting for it in a collective\n");
  // The launcher is about to kill the whole job; an early exit of ours would only make it hurry (Open MPI
  // then SIGKILLs the other survivors before they have said the same). Give them a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::_exit(128 + sig);
}

void report_missing_peers(int sig) {
  if (!dist::is_initialized()) return;
  const dist::ProcessGroup& g = dist::default_group();
  if (g.world_size() < 2) return;
  int stopped_looks = 0;
  for (int look = 0; look < 3; ++look) {  // the launcher may signal the moment it reaps the dead rank
    const std::vector<std::string> gone = g.missing_peers();
    if (!gone.empty()) exit_naming(g, sig, gone, "missing (exited)");
    const std::vector<std::string> stopped = dist::stopped_peers(g);
    stopped_looks = stopped.empty() ? 0 : stopped_looks + 1;
    if (stopped_looks == 2)
      exit_naming(g, sig, stopped, ("stuck (this rank's last collective is " + dist::last_collective(g) + ")").c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void watch() {
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(g_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == 0) return;
    report_missing_peers(static_cast<unsigned char>(c));
    g_watching = 0;  // every peer is alive: the graceful path goes on, and a second signal ends the process
  }
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
  // The watcher is a convenience: without a pipe or a thread the graceful path works as before.
  if (::pipe2(g_pipe, O_CLOEXEC) == 0) {
    try {
      g_watcher = std::thread(watch);
    } catch (const std::system_error&) {
      ::close(g_pipe[0]);
      ::close(g_pipe[1]);
      g_pipe[0] = g_pipe[1] = -1;
    }
  }
}

InterruptGuard::~InterruptGuard() {
  g_depth.fetch_sub(1);
  if (!installed_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  if (g_watcher.joinable()) {
    const char stop = 0;
    (void)!::write(g_pipe[1], &stop, 1);
    g_watcher.join();
  }
  for (int& fd : g_pipe) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

int InterruptGuard::pending() { return g_signal; }

void InterruptGuard::request(int sig) {
  if (g_signal == 0) g_signal = sig;
}

}  // namespace volt
