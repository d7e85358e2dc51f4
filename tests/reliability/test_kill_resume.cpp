// Crash safety, tested on a real process: kill_resume_driver (driver/) trains with a checkpoint after every
// optimizer step; this harness SIGKILLs it at random instants (many inside checkpoint writes, which the
// driver slows down), and after every kill checks that every checkpoint with a record on disk is intact, that
// the newest one never goes backwards, and that resuming from it to the end gives, bit for bit, the weights
// of an uninterrupted run. A second test interrupts with SIGINT and checks the graceful path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <volt/nn/serialization.h>
#include <volt/trainer/checkpoint/locate.h>

#include "trainer/trainer_test_util.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

// The driver: where the build put it, or (a build moved elsewhere, e.g. a bundle run on another host) beside
// this test binary.
const std::string& driver_path() {
  static const std::string path = [] {
    std::error_code ec;
    if (fs::exists(VOLT_KILL_RESUME_DRIVER, ec)) return std::string(VOLT_KILL_RESUME_DRIVER);
    fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "kill_resume_driver";
    return beside.string();
  }();
  return path;
}
constexpr int kEpochs = 6;  // 12 batches each: 72 optimizer steps, each with a checkpoint (fsync-bound)

using Scratch = volt::test::ScratchDir;  // a fresh directory per run, removed afterwards

pid_t start_driver(const std::string& root, const std::string& resume, int slow_us) {
  const std::string& driver = driver_path();
  std::vector<std::string> args = {driver, root, std::to_string(kEpochs)};
  if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
  if (slow_us > 0) args.insert(args.end(), {"--slow-write-us", std::to_string(slow_us)});
  // Built before the fork (the child only execs). The driver trains on the CPU; hidden GPUs keep CUDA's start-up
  // (a context probe of a few hundred ms on a GPU host) out of the kill window, which otherwise ended before the
  // first checkpoint was written.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  static std::string hide_gpus = "CUDA_VISIBLE_DEVICES=";
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, hide_gpus.c_str(), hide_gpus.size()) != 0) envp.push_back(*e);
  envp.push_back(hide_gpus.data());
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(driver.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

int wait_status(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

// Runs the driver to completion; returns its exit code.
int run_driver(const std::string& root, const std::string& resume) {
  const int st = wait_status(start_driver(root, resume, 0));
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

std::vector<uint8_t> final_weights(const std::string& root) {
  std::ifstream in(root + "/final.safetensors", std::ios::binary);
  EXPECT_TRUE(in.good()) << "no final weights in " << root;
  return {std::istreambuf_iterator<char>(in), {}};
}

// Every stem with a JSON record must be a complete, verified checkpoint. Returns the newest stem's
// global_step (-1 when there is none).
int64_t check_all_checkpoints(const std::string& root, int* temp_files) {
  for (const auto& dir : default_checkpoint_dirs(root)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp.") != std::string::npos) ++*temp_files;
      if (e.path().extension() != ".json" || name.front() == '.') continue;
      const std::string stem = (e.path().parent_path() / e.path().stem()).string();
      EXPECT_NO_THROW({
        nlohmann::json j = nn::load_json(stem + ".json");
        EXPECT_TRUE(j.contains("safetensors_digest")) << stem;
        verify_checkpoint_weights(stem, j);
        nn::load_safetensors(stem + ".safetensors");
      }) << "torn checkpoint " << stem;
    }
  }
  const std::string newest = newest_checkpoint(default_checkpoint_dirs(root));
  if (newest.empty()) return -1;
  return nn::load_json(newest + ".json").at("global_step").get<int64_t>();
}

}  // namespace

TEST(KillResume, RandomSigkillsNeverLoseOrTearACheckpointAndResumeIsBitExact) {
  Scratch ref("ref");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run_driver(ref.str(), ""), 0);
  const auto ref_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  const std::vector<uint8_t> expected = final_weights(ref.str());

  Scratch run("kill");
  std::mt19937 rng(12345);
  // Kill instants span a quarter of the uninterrupted run's duration (0.2 to 2 s): on a loaded machine start-up
  // alone can take longer than a fixed window, and then no kill would land after the first checkpoint.
  const int max_delay_us = static_cast<int>(std::clamp<int64_t>(ref_us.count() / 4, 200000, 2000000));
  std::uniform_int_distribution<int> delay_us(2000, max_delay_us);
  int kills = 0, lost = 0, inside_writes = 0, finished_early = 0;
  int64_t newest_step = -1;
  // Kill until 24 kills of which at least one landed inside a checkpoint write (a loaded machine may need more).
  for (int attempt = 0; attempt < 160 && (kills < 24 || (inside_writes == 0 && kills < 60)); ++attempt) {
    const bool have = newest_step >= 0;
    pid_t pid = start_driver(run.str(), have ? "last" : "", /*slow_us=*/200);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(pid, SIGKILL);
    const int st = wait_status(pid);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {  // finished (or failed) before the kill
      ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "driver failed with status " << st;
      // A fast machine finishes the run within fewer kills than wanted: that chain of resumes must already
      // end on the uninterrupted weights; then a fresh run takes the remaining kills.
      EXPECT_EQ(final_weights(run.str()), expected) << "resumed weights differ from the uninterrupted run";
      ++finished_early;
      fs::remove_all(run.path);
      fs::create_directories(run.path);
      newest_step = -1;
      continue;
    }
    ++kills;
    int temps = 0;
    const int64_t step = check_all_checkpoints(run.str(), &temps);
    inside_writes += temps > 0;
    for (const auto& dir : default_checkpoint_dirs(run.str()))  // a killed writer's leftovers
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) fs::remove(e.path());
    if (step < newest_step) ++lost;  // the newest intact checkpoint went backwards
    newest_step = std::max(newest_step, step);
  }
  ASSERT_EQ(run_driver(run.str(), newest_step >= 0 ? "last" : ""), 0);
  EXPECT_EQ(final_weights(run.str()), expected) << "resumed weights differ from the uninterrupted run";
  std::printf("[ kill/resume ] %d SIGKILLs (%d inside a checkpoint write), %d checkpoints lost, newest step %lld "
              "before the final resume%s\n",
              kills, inside_writes, lost, static_cast<long long>(newest_step),
              finished_early ? (", " + std::to_string(finished_early) + " run(s) finished between kills").c_str()
                             : "");
  EXPECT_GE(kills, 20);
  EXPECT_EQ(lost, 0);
  EXPECT_GT(inside_writes, 0) << "no kill landed inside a write: the test does not exercise torn writes";
}

TEST(KillResume, SigintStopsGracefullyWithCheckpointAndLogs) {
  Scratch ref("ref_int");
  ASSERT_EQ(run_driver(ref.str(), ""), 0);
  const std::vector<uint8_t> expected = final_weights(ref.str());

  Scratch run("sigint");
  pid_t pid = start_driver(run.str(), "", /*slow_us=*/300);
  const fs::path ck = run.path / "lightning_logs" / "version_0" / "checkpoints";
  // Signal once the run is visibly under way (its first checkpoint exists), so the stop is mid-training.
  for (int i = 0; i < 5000 && !fs::exists(ck / "last.json"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(fs::exists(ck / "last.json"));
  ::kill(pid, SIGINT);
  const int st = wait_status(pid);
  ASSERT_TRUE(WIFEXITED(st)) << "the driver died of signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGINT);
  ASSERT_TRUE(fs::exists(ck / "interrupted.json"));
  ASSERT_TRUE(fs::exists(ck / "interrupted.safetensors"));
  const nlohmann::json j = nn::load_json((ck / "interrupted.json").string());
  const int64_t steps = j.at("global_step").get<int64_t>();
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, kEpochs * 12);
  verify_checkpoint_weights((ck / "interrupted").string(), j);
  // metrics.csv holds one row per optimizer step taken (log_every_n_steps = 1) plus the header.
  std::ifstream csv(run.path / "lightning_logs" / "version_0" / "metrics.csv");
  ASSERT_TRUE(csv.good());
  int64_t lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, steps + 1);
  EXPECT_FALSE(fs::exists(run.path / "final.safetensors"));

  ASSERT_EQ(run_driver(run.str(), "last"), 0);
  EXPECT_EQ(final_weights(run.str()), expected) << "resume after SIGINT differs from the uninterrupted run";
}
