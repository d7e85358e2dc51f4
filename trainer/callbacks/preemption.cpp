#include <volt/trainer/callbacks/preemption.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include <volt/runtime/error.h>
#include <volt/runtime/log.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/checkpoint/locate.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/strategies/strategy.h>
#include <volt/trainer/trainer.h>

extern char** environ;

namespace volt {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_warned = 0;  // the warning signal arrived and is not handled yet
std::atomic<bool> g_alive{false};         // one Preemption at a time owns the handler

extern "C" void on_warning_signal(int sig) {
  g_warned = 1;
  InterruptGuard::request(sig);
}

std::string signal_name(int sig) {
  const char* d = ::strsignal(sig);
  return std::to_string(sig) + (d ? std::string(" (") + d + ")" : std::string());
}

std::string job_id() {
  const char* array = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array && *array && task && *task) return std::string(array) + "_" + task;
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

struct sigaction g_old {};

}  // namespace

Preemption::Preemption(PreemptionOptions options) : opt_(std::move(options)) {
  const int s = opt_.signal;
  VOLT_CHECK(s > 0 && s < NSIG && s != SIGINT && s != SIGTERM && s != SIGKILL && s != SIGSTOP && s != SIGSEGV &&
                 s != SIGBUS && s != SIGFPE && s != SIGILL && s != SIGABRT && s != SIGCHLD,
             "Preemption: signal=", s, "; expected a signal the scheduler sends as a warning, such as SIGUSR1 (",
             SIGUSR1, ") or SIGUSR2 (", SIGUSR2, "); SIGINT and SIGTERM are the Trainer's interrupt, and KILL, STOP, "
             "CHLD and the fault signals cannot serve");
  VOLT_CHECK(!opt_.filename.empty() && opt_.filename.find('/') == std::string::npos && opt_.filename != "." &&
                 opt_.filename != "..",
             "Preemption: filename=\"", opt_.filename, "\"; expected a plain file name (no '/')");
  VOLT_CHECK(!opt_.requeue_command.empty(), "Preemption: requeue_command is empty; expected a program such as scontrol");
  VOLT_CHECK(opt_.requeue_timeout_s > 0 && opt_.requeue_timeout_s < 1e7, "Preemption: requeue_timeout_s=",
             opt_.requeue_timeout_s, "; expected seconds > 0");
  VOLT_CHECK(!g_alive.exchange(true), "Preemption: another Preemption callback is alive; only one may own the ",
             signal_name(s), " handler at a time");
  g_warned = 0;
  struct sigaction sa {};
  sa.sa_handler = on_warning_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(s, &sa, &g_old) != 0) {
    g_alive = false;
    VOLT_FAIL("Preemption: cannot install a handler for signal ", signal_name(s), ": ", std::strerror(errno));
  }
}

Preemption::~Preemption() {
  sigaction(opt_.signal, &g_old, nullptr);
  g_warned = 0;
  g_alive = false;
}

void Preemption::on_fit_start(Trainer&, TrainModule&) {
  decided_ = preempted_ = requeued_ = false;
  checkpoint_.clear();
  requeue_error_.clear();
  // A warning that came before fit installed its interrupt guard (during set-up or the restore) was dropped by
  // it: ask again, so the first step boundary stops the fit.
  if (g_warned) InterruptGuard::request(opt_.signal);
}

bool Preemption::agree_preempted(Trainer& trainer) {
  if (!decided_) {
    decided_ = true;
    preempted_ = trainer.strategy().reduce_decision(g_warned != 0, /*all=*/false);
  }
  return preempted_;
}

void Preemption::on_interrupt(Trainer& trainer, TrainModule&) {
  if (!agree_preempted(trainer)) return;  // a plain SIGINT/SIGTERM: ModelCheckpoint's "interrupted" covers it
  g_warned = 0;
  Strategy& s = trainer.strategy();
  std::string dir = opt_.dirpath;
  for (auto& c : trainer.callbacks()) {
    auto* mc = dynamic_cast<ModelCheckpoint*>(c.get());
    if (!dir.empty() || !mc) continue;
    dir = !mc->dirpath().empty() ? mc->dirpath() : mc->options().dirpath;
    break;
  }
  if (dir.empty()) dir = (fs::path(trainer.log_dir()) / "checkpoints").string();
  dir = s.broadcast_string(dir, 0);  // loggers (and so log_dir) live on rank 0
  checkpoint_ = (fs::path(dir) / opt_.filename).string();
  trainer.save_checkpoint(checkpoint_);
  if (s.is_global_zero())
    std::cerr << "Preemption: signal " << signal_name(opt_.signal) << ": checkpoint saved to " << checkpoint_
              << " at step " << trainer.global_step() << "\n";
  if (!opt_.auto_requeue) return;
  std::string error = s.is_global_zero() ? requeue() : std::string();
  requeue_error_ = s.broadcast_string(error, 0);
  requeued_ = requeue_error_.empty();
  if (s.is_global_zero()) {
    if (requeued_) std::cerr << "Preemption: job " << job_id() << " requeued\n" << std::flush;
    else logging::warn("Preemption: " + requeue_error_);
  }
}

std::string Preemption::requeue() const {
  const std::string id = job_id();
  const std::string what = "auto_requeue: ";
  if (id.empty())
    return what + "SLURM_JOB_ID is not set (not running under SLURM?), so the job was not requeued; the checkpoint " +
           checkpoint_ + " is saved, resume from it by hand";
  std::vector<std::string> args = {opt_.requeue_command, "requeue", id};
  const std::string command = args[0] + " requeue " + id;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return what + "cannot run \"" + command + "\": " + std::strerror(rc) + "; the job was not requeued";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.requeue_timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR)
      return what + "lost track of \"" + command + "\": " + std::strerror(errno) + "; the job may not be requeued";
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      std::ostringstream os;
      os << opt_.requeue_timeout_s;
      return what + "\"" + command + "\" did not finish within requeue_timeout_s=" + os.str() +
             " s and was killed; the job may not be requeued";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status))
    return what + "\"" + command + "\" exited with status " + std::to_string(WEXITSTATUS(status)) +
           "; the job was not requeued";
  return what + "\"" + command + "\" was killed by signal " + signal_name(WTERMSIG(status)) +
         "; the job was not requeued";
}

std::string Preemption::resume_path(Trainer& trainer) {
  std::string found, error;
  Strategy& s = trainer.strategy();
  if (s.is_global_zero()) {
    try {
      std::vector<std::string> dirs;
      if (!opt_.dirpath.empty()) dirs.push_back(opt_.dirpath);
      for (auto& c : trainer.callbacks())
        if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get()); mc && !mc->options().dirpath.empty())
          dirs.push_back(mc->options().dirpath);
      for (auto& d : default_checkpoint_dirs(trainer.options().default_root_dir)) dirs.push_back(d);
      found = newest_checkpoint(dirs);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = s.broadcast_string(error, 0);
  VOLT_CHECK(error.empty(), "Preemption::resume_path: ", error);
  return s.broadcast_string(found, 0);
}

}  // namespace volt
