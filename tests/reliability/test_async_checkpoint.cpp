// AsyncCheckpointing (trainer/callbacks/async_checkpointing.h): checkpoints written by a background thread are
// the same files a synchronous save writes, training goes on while they are written, at most one write is in
// flight, a failed write is raised at the next step (or by fit's end), and an interrupt's checkpoint is written
// synchronously.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/atomic_file.h>
#include <volt/trainer/callbacks/async_checkpointing.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

#include "trainer/trainer_test_util.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

struct Mlp : TrainModule {
  nn::Linear fc1{4, 32}, fc2{32, 1};
  int64_t raise_at_step = -1;  // SIGINT from training_step at this global step
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  std::string type_name() const override { return "Mlp"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    if (trainer()->global_step() == raise_at_step) std::raise(SIGINT);
    Tensor h = dropout(relu(fc1.forward(batch.input)), 0.2, is_training());
    return mse_loss(fc2.forward(h).reshape({-1}), batch.target);
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 0.02});
  }
};

std::shared_ptr<data::DataLoader> make_loader() {
  const int64_t n = 64, d = 4;
  std::vector<float> xs(n * d), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) xs[i * d + j] = static_cast<float>(std::sin(0.37 * i + 1.1 * j));
    ys[i] = xs[i * d] - 0.5f * xs[i * d + 2];
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {n, d}), from_vector(ys, {n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 8, .shuffle = true});
}

// What the write hook saw: per call, the destination, the writing thread, and the training step at that moment.
struct HookCall {
  std::string path;
  std::thread::id thread;
  int64_t step_now;
};
std::mutex g_mu;
std::vector<HookCall> g_calls;
std::atomic<int64_t> g_step{0};
std::string g_fail_on;  // a destination containing this fails (a simulated full disk)
int g_sleep_us = 0;

void hook(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_calls.push_back({path, std::this_thread::get_id(), g_step.load()});
  }
  if (!g_fail_on.empty() && path.find(g_fail_on) != std::string::npos) VOLT_FAIL("simulated disk full writing ", path);
  if (g_sleep_us > 0) ::usleep(g_sleep_us);
}

struct StepProbe : Callback {
  std::string state_key() const override { return "StepProbe"; }
  void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const Batch&, int64_t) override {
    g_step = t.global_step();
  }
};

struct HookScope {
  HookScope(int sleep_us, std::string fail_on = "") {
    std::lock_guard<std::mutex> lock(g_mu);
    g_calls.clear();
    g_sleep_us = sleep_us;
    g_fail_on = std::move(fail_on);
    g_step = 0;
    set_atomic_write_hook(&hook);
  }
  ~HookScope() {
    set_atomic_write_hook(nullptr);
    g_fail_on.clear();
    g_sleep_us = 0;
  }
};

using Scratch = volt::test::ScratchDir;  // a fresh directory per run, removed afterwards

// Trains 2 epochs (16 optimizer steps) with a checkpoint after every step; `async` adds AsyncCheckpointing
// (first in the list, so its per-step check runs before that step's save).
struct Fit {
  std::unique_ptr<Mlp> owned;
  Mlp& model;
  std::shared_ptr<AsyncCheckpointing> async;
  std::unique_ptr<Trainer> trainer;
  // The same initial weights in every Fit of this process.
  static std::unique_ptr<Mlp> seeded_model() {
    seed_everything(7);
    return std::make_unique<Mlp>();
  }
  Fit(const fs::path& dir, bool with_async, int64_t epochs = 2) : owned(seeded_model()), model(*owned) {
    std::vector<std::shared_ptr<Callback>> cbs;
    if (with_async) cbs.push_back(async = std::make_shared<AsyncCheckpointing>());
    cbs.push_back(std::make_shared<StepProbe>());
    cbs.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
        .dirpath = dir.string(), .filename = "step={step}", .save_top_k = -1, .every_n_train_steps = 1}));
    trainer = std::make_unique<Trainer>(TrainerOptions{
        .accelerator = "cpu", .devices = "1", .max_epochs = epochs, .enable_progress_bar = false,
        .enable_model_summary = false, .default_root_dir = dir.string(), .logger = false, .callbacks = cbs,
        .seed = 7});
  }
  void run() { trainer->fit(model, make_loader()); }
};

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

nlohmann::json record_without_async(const fs::path& p) {
  nlohmann::json j = nn::load_json(p.string());
  j["callbacks"].erase("AsyncCheckpointing");
  return j;
}

}  // namespace

TEST(AsyncCheckpoint, WritesTheSameFilesAsSynchronousSavesWhileTrainingGoesOn) {
  Scratch s("same");
  const fs::path dir = s.path / "ckpt", sync_dir = s.path / "sync";
  {
    Fit f(dir, /*async=*/false);
    f.run();
  }
  fs::rename(dir, sync_dir);  // the same directory for both runs: the records name it
  HookScope h(/*sleep_us=*/3000);
  Fit f(dir, /*async=*/true);
  f.run();
  EXPECT_EQ(f.async->writes_done(), 16);
  for (int64_t step = 1; step <= 16; ++step) {
    const std::string stem = "step=" + std::to_string(step);
    ASSERT_TRUE(fs::exists(dir / (stem + ".json"))) << stem;
    EXPECT_TRUE(bytes(dir / (stem + ".safetensors")) == bytes(sync_dir / (stem + ".safetensors"))) << stem;
    EXPECT_TRUE(record_without_async(dir / (stem + ".json")) == nn::load_json((sync_dir / (stem + ".json")).string()))
        << stem;
  }
  // Every write ran on one background thread; training went on during some of them; and the writes never
  // overlapped: once a checkpoint's write began, the previous one's had ended.
  std::lock_guard<std::mutex> lock(g_mu);
  ASSERT_FALSE(g_calls.empty());
  int overlapped_training = 0;
  std::vector<std::string> order;
  for (const HookCall& c : g_calls) {
    EXPECT_NE(c.thread, std::this_thread::get_id()) << c.path << " was written on the training thread";
    EXPECT_EQ(c.thread, g_calls.front().thread);
    const std::string stem = fs::path(c.path).stem().string();
    const int64_t step = std::stoll(stem.substr(5));
    overlapped_training += c.step_now > step;
    if (order.empty() || order.back() != stem) {
      EXPECT_EQ(std::count(order.begin(), order.end(), stem), 0) << stem << "'s write was interleaved with another";
      order.push_back(stem);
    }
  }
  EXPECT_EQ(order.size(), 16u);
  EXPECT_GT(overlapped_training, 0) << "no training step ran while a checkpoint was being written";
}

TEST(AsyncCheckpoint, AFailedWriteIsRaisedAtTheNextStepOnTheTrainingThread) {
  Scratch s("fail");
  const fs::path dir = s.path / "ckpt";
  HookScope h(/*sleep_us=*/0, /*fail_on=*/"step=3.safetensors");
  Fit f(dir, /*async=*/true);
  try {
    f.run();
    FAIL() << "fit did not report the failed write";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("AsyncCheckpointing: the background write of checkpoint " + (dir / "step=3").string() +
                       " failed:"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("simulated disk full"), std::string::npos) << msg;
  }
  EXPECT_EQ(f.trainer->global_step(), 4) << "the failure of step 3's write must stop the next step";
  EXPECT_TRUE(fs::exists(dir / "step=2.json"));
  EXPECT_FALSE(fs::exists(dir / "step=3.json"));
  EXPECT_FALSE(fs::exists(dir / "step=3.safetensors"));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
}

TEST(AsyncCheckpoint, FitWaitsForTheLastWriteAndReportsItsFailure) {
  Scratch s("last");
  const fs::path dir = s.path / "ckpt";
  {
    HookScope h(/*sleep_us=*/20000);  // the last write is still in flight when training ends
    Fit f(dir, /*async=*/true, /*epochs=*/1);
    f.run();
    EXPECT_EQ(f.async->writes_done(), 8);
    EXPECT_TRUE(fs::exists(dir / "step=8.json")) << "fit returned before its last checkpoint was written";
  }
  fs::remove_all(dir);
  HookScope h(/*sleep_us=*/0, /*fail_on=*/"step=8.safetensors");
  Fit f(dir, /*async=*/true, /*epochs=*/1);
  EXPECT_THROW(f.run(), Error);
  EXPECT_FALSE(fs::exists(dir / "step=8.json"));
}

TEST(AsyncCheckpoint, AnInterruptsCheckpointIsWrittenSynchronously) {
  Scratch s("interrupt");
  const fs::path dir = s.path / "ckpt";
  HookScope h(/*sleep_us=*/2000);
  Fit f(dir, /*async=*/true);
  f.model.raise_at_step = 5;
  f.run();
  ASSERT_TRUE(f.trainer->interrupted());
  ASSERT_TRUE(fs::exists(dir / "interrupted.json"));
  std::lock_guard<std::mutex> lock(g_mu);
  int on_training_thread = 0;
  for (const HookCall& c : g_calls)
    if (c.path.find("interrupted") != std::string::npos) {
      EXPECT_EQ(c.thread, std::this_thread::get_id());
      ++on_training_thread;
    }
  EXPECT_GT(on_training_thread, 0);
}
