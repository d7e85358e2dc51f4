// Preemption on a real process: preempt_driver (driver/) trains with a Preemption callback; the test sends it
// the scheduler's warning signal (SIGUSR1) mid-training, with a fake `scontrol` first on PATH that records its
// arguments, and checks the checkpoint, the requeue call, and that the requeued run (ckpt_path from
// Preemption::resume_path) ends with the weights of an uninterrupted run, bit for bit. The failure modes of the
// requeue (no job id, a failing, missing or hanging scontrol) are warnings that never stop the clean exit.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <volt/nn/serialization.h>
#include <volt/runtime/error.h>
#include <volt/trainer/callbacks/preemption.h>
#include <volt/trainer/checkpoint/locate.h>

#include "trainer/trainer_test_util.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

const std::string& driver_path() {
  static const std::string path = [] {
    std::error_code ec;
    if (fs::exists(VOLT_PREEMPT_DRIVER, ec)) return std::string(VOLT_PREEMPT_DRIVER);
    return (fs::read_symlink("/proc/self/exe", ec).parent_path() / "preempt_driver").string();
  }();
  return path;
}
constexpr int kEpochs = 3;  // 24 batches each: 72 optimizer steps
constexpr int kPreempted = 42;

using Scratch = volt::test::ScratchDir;  // a fresh directory per run, removed afterwards

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A fake scontrol in <dir>/bin that appends its arguments to <dir>/scontrol.log and then does `body`.
std::string fake_scontrol(const fs::path& dir, const std::string& body = "exit 0", const std::string& name = "scontrol") {
  fs::create_directories(dir / "bin");
  const fs::path script = dir / "bin" / name;
  std::ofstream(script) << "#!/bin/sh\necho \"$@\" >> \"" << (dir / "scontrol.log").string() << "\"\n" << body << "\n";
  fs::permissions(script, fs::perms::owner_all);
  return (dir / "bin").string();
}

struct Job {
  pid_t pid = -1;
  fs::path out, err;
};

// Starts the driver with extra environment (`env`: name -> value, "" removes it); stdout/stderr go to files.
Job start(const std::string& root, std::vector<std::string> flags, const std::map<std::string, std::string>& env) {
  Job r;
  r.out = fs::path(root) / ("stdout." + std::to_string(::getpid()) + "." + std::to_string(std::rand()));
  r.err = r.out.string() + ".err";
  std::vector<std::string> args = {driver_path(), root, std::to_string(kEpochs)};
  for (auto& f : flags) args.push_back(f);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (env.count(name) || name == "CUDA_VISIBLE_DEVICES" || name.rfind("SLURM_", 0) == 0) continue;
    envs.push_back(kv);
  }
  envs.push_back("CUDA_VISIBLE_DEVICES=");  // CPU only: no CUDA start-up in the signal window
  for (auto& [k, v] : env)
    if (!v.empty()) envs.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string out = r.out.string(), err = r.err.string();
  r.pid = ::fork();
  if (r.pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return r;
}

int finish(const Job& r) {
  int st = 0;
  while (::waitpid(r.pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

// Waits until the driver has taken 3 optimizer steps, then sends `sig`.
void signal_when_training(const Job& r, const std::string& root, int sig) {
  const fs::path progress = fs::path(root) / "progress.0";
  for (int i = 0; i < 20000 && !fs::exists(progress); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(fs::exists(progress)) << "the driver never got under way: " << read_file(r.err);
  ::kill(r.pid, sig);
}

std::string path_with(const std::string& bin) { return bin + ":" + (std::getenv("PATH") ? std::getenv("PATH") : ""); }

const std::vector<uint8_t>& reference_weights() {
  static const std::vector<uint8_t> w = [] {
    Scratch ref("ref");
    Job r = start(ref.str(), {"--resume", "auto"}, {});
    const int rc = finish(r);
    EXPECT_EQ(rc, 0) << read_file(r.err);
    const std::string bytes = read_file(ref.path / "final.safetensors");
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  }();
  return w;
}

std::vector<uint8_t> final_weights(const std::string& root) {
  const std::string bytes = read_file(fs::path(root) / "final.safetensors");
  EXPECT_FALSE(bytes.empty()) << "no final weights in " << root;
  return {bytes.begin(), bytes.end()};
}

const fs::path kCkptDir = fs::path("lightning_logs") / "version_0" / "checkpoints";

// The preemption checkpoint: complete, verified, mid-run. Returns its global_step.
int64_t check_preempted_checkpoint(const Scratch& s) {
  const fs::path stem = s.path / kCkptDir / "preempted";
  EXPECT_TRUE(fs::exists(stem.string() + ".json"));
  EXPECT_TRUE(fs::exists(stem.string() + ".safetensors"));
  if (!fs::exists(stem.string() + ".json")) return -1;
  const nlohmann::json j = nn::load_json(stem.string() + ".json");
  EXPECT_NO_THROW(verify_checkpoint_weights(stem.string(), j));
  // One write for the stop: the ModelCheckpoint leaves "interrupted" to the preemption checkpoint.
  EXPECT_FALSE(fs::exists(s.path / kCkptDir / "interrupted.json"));
  return j.at("global_step").get<int64_t>();
}

}  // namespace

TEST(Preemption, WarningSignalSavesRequeuesAndTheRequeuedRunResumesBitExact) {
  const std::vector<uint8_t>& expected = reference_weights();
  ASSERT_FALSE(expected.empty());
  Scratch s("requeue");
  const std::string bin = fake_scontrol(s.path);
  const std::map<std::string, std::string> env = {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "4242"}};
  Job r = start(s.str(), {"--resume", "auto", "--requeue", "--step-ms", "5"}, env);
  signal_when_training(r, s.str(), SIGUSR1);
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  const int64_t step = check_preempted_checkpoint(s);
  EXPECT_GE(step, 3);
  EXPECT_LT(step, kEpochs * 24) << "the signal landed after the run ended; the test did not preempt";
  EXPECT_EQ(read_file(s.path / "scontrol.log"), "requeue 4242\n");
  EXPECT_NE(read_file(r.out).find("requeued=1"), std::string::npos) << read_file(r.out);
  EXPECT_NE(read_file(r.err).find("Preemption: job 4242 requeued"), std::string::npos) << read_file(r.err);
  EXPECT_FALSE(fs::exists(s.path / "final.safetensors"));

  // The requeued allocation: the same command line, which finds the checkpoint on its own.
  Job again = start(s.str(), {"--resume", "auto", "--requeue"}, env);
  ASSERT_EQ(finish(again), 0) << read_file(again.err);
  EXPECT_EQ(final_weights(s.str()), expected) << "the requeued run's weights differ from the uninterrupted run";
  EXPECT_EQ(read_file(s.path / "scontrol.log"), "requeue 4242\n") << "a finished run must not requeue";
}

TEST(Preemption, ArrayJobsRequeueTheirTask) {
  Scratch s("array");
  const std::string bin = fake_scontrol(s.path);
  Job r = start(s.str(), {"--requeue", "--signal-before-fit"},
                {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "900"}, {"SLURM_ARRAY_JOB_ID", "77"},
                 {"SLURM_ARRAY_TASK_ID", "3"}});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  EXPECT_EQ(read_file(s.path / "scontrol.log"), "requeue 77_3\n");
}

TEST(Preemption, AWarningBeforeFitStopsAtTheFirstStepBoundaryAndResumesBitExact) {
  const std::vector<uint8_t>& expected = reference_weights();
  Scratch s("early");
  Job r = start(s.str(), {"--resume", "auto", "--signal-before-fit"}, {});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  EXPECT_EQ(check_preempted_checkpoint(s), 0);
  Job again = start(s.str(), {"--resume", "auto"}, {});
  ASSERT_EQ(finish(again), 0) << read_file(again.err);
  EXPECT_EQ(final_weights(s.str()), expected);
}

TEST(Preemption, WithoutAutoRequeueNothingIsRun) {
  Scratch s("norequeue");
  const std::string bin = fake_scontrol(s.path);
  Job r = start(s.str(), {"--step-ms", "5"}, {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "4242"}});
  signal_when_training(r, s.str(), SIGUSR1);
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  check_preempted_checkpoint(s);
  EXPECT_NE(read_file(r.out).find("requeued=0"), std::string::npos);
  EXPECT_FALSE(fs::exists(s.path / "scontrol.log"));
}

TEST(Preemption, AConfiguredSignalIsTheWarning) {
  Scratch s("usr2");
  Job r = start(s.str(), {"--step-ms", "5", "--signal", std::to_string(SIGUSR2)}, {});
  signal_when_training(r, s.str(), SIGUSR2);
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  check_preempted_checkpoint(s);
}

TEST(Preemption, APlainSigtermIsStillAnInterruptNotAPreemption) {
  Scratch s("sigterm");
  const std::string bin = fake_scontrol(s.path);
  Job r = start(s.str(), {"--requeue", "--step-ms", "5"}, {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "4242"}});
  signal_when_training(r, s.str(), SIGTERM);
  ASSERT_EQ(finish(r), 128 + SIGTERM) << read_file(r.err);
  EXPECT_TRUE(fs::exists(s.path / kCkptDir / "interrupted.json"));
  EXPECT_FALSE(fs::exists(s.path / kCkptDir / "preempted.json"));
  EXPECT_FALSE(fs::exists(s.path / "scontrol.log"));
}

TEST(Preemption, AMissingJobIdIsAWarningAndTheRunStillStopsCleanly) {
  Scratch s("nojob");
  const std::string bin = fake_scontrol(s.path);
  Job r = start(s.str(), {"--requeue", "--signal-before-fit"}, {{"PATH", path_with(bin)}});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  check_preempted_checkpoint(s);
  EXPECT_NE(read_file(r.err).find("auto_requeue: SLURM_JOB_ID is not set"), std::string::npos) << read_file(r.err);
  EXPECT_NE(read_file(r.out).find("requeued=0"), std::string::npos);
  EXPECT_FALSE(fs::exists(s.path / "scontrol.log"));
}

TEST(Preemption, AFailingScontrolIsAWarning) {
  Scratch s("fails");
  const std::string bin = fake_scontrol(s.path, "echo 'scontrol: error: Requeue not permitted' >&2; exit 1");
  Job r = start(s.str(), {"--requeue", "--signal-before-fit"}, {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "4242"}});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  check_preempted_checkpoint(s);
  const std::string err = read_file(r.err);
  EXPECT_NE(err.find("auto_requeue: \"scontrol requeue 4242\" exited with status 1; the job was not requeued"),
            std::string::npos) << err;
  EXPECT_NE(err.find("Requeue not permitted"), std::string::npos) << "scontrol's own message is lost: " << err;
}

TEST(Preemption, AMissingScontrolIsAWarning) {
  Scratch s("missing");
  Job r = start(s.str(), {"--requeue", "--signal-before-fit", "--requeue-command", "volt-no-such-scontrol"},
                {{"SLURM_JOB_ID", "4242"}});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  check_preempted_checkpoint(s);
  EXPECT_NE(read_file(r.err).find("auto_requeue: cannot run \"volt-no-such-scontrol requeue 4242\""),
            std::string::npos) << read_file(r.err);
}

TEST(Preemption, AHangingScontrolIsKilledAfterItsTimeout) {
  Scratch s("hangs");
  const std::string bin = fake_scontrol(s.path, "exec sleep 60");
  const auto t0 = std::chrono::steady_clock::now();
  Job r = start(s.str(), {"--requeue", "--signal-before-fit", "--requeue-timeout", "1"},
                {{"PATH", path_with(bin)}, {"SLURM_JOB_ID", "4242"}});
  ASSERT_EQ(finish(r), kPreempted) << read_file(r.err);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_NE(read_file(r.err).find("\"scontrol requeue 4242\" did not finish within requeue_timeout_s=1 s and was "
                                  "killed"),
            std::string::npos) << read_file(r.err);
}

TEST(Preemption, OptionsAreChecked) {
  auto message = [](PreemptionOptions o) {
    try {
      Preemption p(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.signal = SIGTERM}).find("Preemption: signal=15; expected a signal the scheduler sends"),
            std::string::npos);
  EXPECT_NE(message({.signal = SIGKILL}).find("signal=9"), std::string::npos);
  EXPECT_NE(message({.signal = 0}).find("signal=0"), std::string::npos);
  EXPECT_NE(message({.filename = "a/b"}).find("filename=\"a/b\"; expected a plain file name"), std::string::npos);
  EXPECT_NE(message({.requeue_command = ""}).find("requeue_command is empty"), std::string::npos);
  EXPECT_NE(message({.requeue_timeout_s = 0}).find("requeue_timeout_s=0"), std::string::npos);
  Preemption one;
  EXPECT_NE(message({.signal = SIGUSR2}).find("another Preemption callback is alive"), std::string::npos);
}

TEST(Preemption, TheHandlerIsInstalledForItsLifetimeOnly) {
  struct sigaction before {}, during {}, after {};
  sigaction(SIGUSR2, nullptr, &before);
  {
    Preemption p({.signal = SIGUSR2});
    sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
    ::raise(SIGUSR2);  // recorded, not the default action (which would end this test process)
  }
  sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}
