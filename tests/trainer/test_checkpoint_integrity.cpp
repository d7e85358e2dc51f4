// Crash-safety pieces of checkpoints: the weights digest (a flipped byte or a truncation is a clear error,
// records without a digest still load), step-triggered mid-epoch checkpoints that resume bit-exactly,
// ckpt_path "last"/"best", and graceful SIGINT during fit.
#include <csignal>
#include <cstring>

#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {

struct AdamModule : TinyModule {
  AdamModule() {
    dropout_p = 0.2;
    make_optimizers = [](TinyModule& mm) {
      auto opt = std::make_shared<optim::Adam>(mm.parameters(), optim::AdamOptions{.lr = 0.05});
      Optimizers o(opt);
      o.schedulers.push_back({std::make_shared<optim::StepLR>(*opt, 1, 0.5), SchedulerInterval::epoch, 1});
      return o;
    };
  }
};

TrainerOptions opts(const std::string& dir, int64_t epochs) {
  auto o = quiet(dir);
  o.max_epochs = epochs;
  o.seed = 99;
  return o;
}

// 10 samples in batches of 3: 4 batches (optimizer steps) per epoch.
std::shared_ptr<data::DataLoader> loader() { return make_loader(10, 3, /*shuffle=*/true); }

void expect_same_weights(const TinyModule& a, const TinyModule& b) {
  auto aw = values(a.w), bw = values(b.w), ab = values(a.b), bb = values(b.b);
  ASSERT_EQ(aw.size(), bw.size());
  EXPECT_EQ(std::memcmp(aw.data(), bw.data(), aw.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(ab.data(), bb.data(), sizeof(float)), 0);
}

std::shared_ptr<ModelCheckpoint> every_steps(const std::string& dir, int64_t n, bool save_last = false) {
  return std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.dirpath = dir, .save_top_k = -1, .save_last = save_last, .every_n_train_steps = n});
}

std::set<std::string> json_names(const std::string& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.insert(e.path().stem().string());
  return out;
}

}  // namespace

TEST(CheckpointIntegrity, FlippedByteAndTruncationAreClearErrorsOldRecordsStillLoad) {
  ScratchDir dir("integrity");
  const std::string ck = (dir.path / "ck").string();
  {
    AdamModule m;
    auto o = opts(dir.str(), 1);
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .filename = "c"})};
    Trainer t(o);
    t.fit(m, loader());
  }
  const std::string st = ck + "/c.safetensors";
  nlohmann::json rec = nn::load_json(ck + "/c.json");
  ASSERT_TRUE(rec.contains("safetensors_digest"));
  EXPECT_EQ(rec["safetensors_digest"]["bytes"].get<uint64_t>(), fs::file_size(st));
  std::string good;
  {
    std::ifstream in(st, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& bytes) { std::ofstream(st, std::ios::binary | std::ios::trunc) << bytes; };
  auto resume = [&] {
    AdamModule r;
    Trainer t(opts(dir.str(), 2));
    t.fit(r, loader(), nullptr, ck + "/c");
  };
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;  // inside the last tensor's data: the safetensors header stays valid
  write(flipped);
  VOLT_EXPECT_ERROR(resume(), "c.safetensors", "corrupt", "CRC-32");
  write(good.substr(0, good.size() - 8));
  const std::string got = std::to_string(good.size() - 8) + " bytes", want = "says " + std::to_string(good.size());
  VOLT_EXPECT_ERROR(resume(), "c.safetensors", got.c_str(), want.c_str());
  // A record written before digests existed loads unchecked.
  write(good);
  rec.erase("safetensors_digest");
  nn::save_json_atomic(ck + "/c.json", rec);
  EXPECT_NO_THROW(resume());
}

TEST(CheckpointIntegrity, EveryNTrainStepsResumesMidEpochAndAtEpochEndBitExact) {
  ScratchDir dir("every_steps");
  AdamModule straight;
  {
    Trainer t(opts(dir.str(), 2));
    t.fit(straight, loader());
  }
  for (int64_t n : {3, 4}) {
    const std::string ck = (dir.path / ("ck" + std::to_string(n))).string();
    {
      AdamModule first;
      auto o = opts(dir.str(), 2);
      o.callbacks = {every_steps(ck, n)};
      Trainer t(o);
      t.fit(first, loader());
    }
    // Step 3 is mid-epoch 0 (batch 3 of 4); step 4 is epoch 0's last batch, saved after its epoch end. No
    // epoch-end saves otherwise (every_n_epochs defaults to 0 with a step trigger).
    if (n == 3) EXPECT_EQ(json_names(ck), (std::set<std::string>{"epoch=0-step=3", "epoch=1-step=6"}));
    else EXPECT_EQ(json_names(ck), (std::set<std::string>{"epoch=0-step=4", "epoch=1-step=8"}));
    const std::string from = ck + (n == 3 ? "/epoch=0-step=3" : "/epoch=0-step=4");
    EXPECT_EQ(nn::load_json(from + ".json").at("batches_done").get<int64_t>(), n == 3 ? 3 : 4);
    AdamModule resumed;
    Trainer t(opts(dir.str(), 2));
    t.fit(resumed, loader(), nullptr, from);
    EXPECT_EQ(resumed.train_steps, 8 - n);
    EXPECT_EQ(t.global_step(), 8);
    expect_same_weights(straight, resumed);
  }
}

TEST(CheckpointIntegrity, CkptPathLastAndBest) {
  ScratchDir dir("last_best");
  AdamModule straight;
  {
    Trainer t(opts(dir.str(), 2));
    t.fit(straight, loader());
  }
  const std::string root = (dir.path / "run").string();
  {
    AdamModule r;
    Trainer t(opts(root, 1));
    VOLT_EXPECT_ERROR(t.fit(r, loader(), nullptr, "last"), "ckpt_path=\"last\"", "no complete checkpoint",
                      "lightning_logs/version_*/checkpoints");
  }
  {
    AdamModule first;
    auto o = opts(root, 2);
    o.max_steps = 6;  // checkpoints at steps 3 and 6 under lightning_logs/version_1/checkpoints
    o.callbacks = {std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.save_last = true, .every_n_train_steps = 3})};
    Trainer t(o);
    t.fit(first, loader());
  }
  AdamModule resumed;
  {
    Trainer t(opts(root, 2));
    t.fit(resumed, loader(), nullptr, "last");
    EXPECT_EQ(resumed.train_steps, 2);
    EXPECT_EQ(t.global_step(), 8);
  }
  expect_same_weights(straight, resumed);
  AdamModule r;
  Trainer t(opts(root, 2));
  VOLT_EXPECT_ERROR(t.fit(r, loader(), nullptr, "best"), "ckpt_path=\"best\"", "monitor");
}

TEST(CheckpointIntegrity, SigintStopsAfterTheStepWithAnInterruptedCheckpoint) {
  ScratchDir dir("sigint");
  AdamModule straight;
  {
    Trainer t(opts(dir.str(), 2));
    t.fit(straight, loader());
  }
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  const std::string ck = (dir.path / "ck").string();
  {
    AdamModule first;
    first.on_train_step = [](TinyModule& m, const Batch&, int64_t, const Tensor& loss) {
      m.log("loss", loss);
      if (m.train_steps == 6) std::raise(SIGINT);  // epoch 1, second batch
    };
    auto o = opts(dir.str(), 2);
    o.logger = true;
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck})};
    Trainer t(o);
    t.fit(first, loader());
    EXPECT_TRUE(t.interrupted());
    EXPECT_EQ(t.interrupt_signal(), SIGINT);
    EXPECT_EQ(t.global_step(), 6);
    EXPECT_EQ(first.train_steps, 6);
    const nlohmann::json j = nn::load_json(ck + "/interrupted.json");
    EXPECT_EQ(j.at("epoch").get<int64_t>(), 1);
    EXPECT_EQ(j.at("batches_done").get<int64_t>(), 2);
    // The logger was flushed: one row per optimizer step so far.
    EXPECT_EQ(read_csv(t.logger()->log_dir() + "/metrics.csv").rows.size(), 6u);
  }
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "fit must restore the previous SIGINT handler";
  AdamModule resumed;
  Trainer t(opts(dir.str(), 2));
  t.fit(resumed, loader(), nullptr, ck + "/interrupted");
  EXPECT_FALSE(t.interrupted());
  EXPECT_EQ(resumed.train_steps, 2);
  expect_same_weights(straight, resumed);
}

TEST(CheckpointIntegrity, TrainTimeIntervalSavesOncePerElapsedInterval) {
  ScratchDir dir("time_interval");
  const std::string ck = (dir.path / "ck").string();
  AdamModule m;
  auto o = opts(dir.str(), 1);
  // A 1 ns interval has always passed after a batch: a save per batch (the last one at the epoch end).
  o.callbacks = {std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.dirpath = ck, .save_top_k = -1, .train_time_interval = 1e-9})};
  Trainer t(o);
  t.fit(m, loader());
  EXPECT_EQ(json_names(ck), (std::set<std::string>{"epoch=0-step=1", "epoch=0-step=2", "epoch=0-step=3",
                                                   "epoch=0-step=4"}));
  VOLT_EXPECT_ERROR(ModelCheckpoint(ModelCheckpointOptions{.train_time_interval = -1}), "train_time_interval=-1");
  VOLT_EXPECT_ERROR(ModelCheckpoint(ModelCheckpointOptions{.every_n_train_steps = -2}), "every_n_train_steps=-2");
}
