// Checkpoint format, validity and bit-exact resume (2 epochs straight == 1 epoch + resume + 1 epoch).
#include <cstring>

#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {
// Adam + an epoch StepLR + a step LambdaLR, a shuffled loader and input dropout: every piece of state that
// resume has to restore (weights, optimizer moments and step counts, schedulers, loader order, Philox offset).
struct ResumeModule : TinyModule {
  ResumeModule() {
    dropout_p = 0.2;
    make_optimizers = [](TinyModule& mm) {
      auto opt = std::make_shared<optim::Adam>(mm.parameters(), optim::AdamOptions{.lr = 0.05});
      Optimizers o(opt);
      o.schedulers.push_back({std::make_shared<optim::StepLR>(*opt, 1, 0.5), SchedulerInterval::epoch, 1});
      o.schedulers.push_back(
          {std::make_shared<optim::LambdaLR>(*opt, [](int64_t s) { return 1.0 / (1.0 + 0.1 * s); }), SchedulerInterval::step, 1});
      return o;
    };
  }
};

TrainerOptions resume_opts(const std::string& dir, int64_t epochs) {
  auto o = quiet(dir);
  o.max_epochs = epochs;
  o.seed = 1234;
  return o;
}

void expect_bit_equal(const Tensor& a, const Tensor& b, const char* what) {
  auto x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what;
}
}  // namespace

TEST(CheckpointResume, TwoEpochsEqualOnePlusResumeBitExact) {
  ScratchDir dir("resume");
  ResumeModule straight;
  double straight_lr = 0;
  {
    Trainer t(resume_opts(dir.str(), 2));
    t.fit(straight, make_loader(10, 3, /*shuffle=*/true), make_loader(4, 2));
    EXPECT_EQ(t.global_step(), 8);
    straight_lr = t.optimizers()[0]->param_groups()[0].lr;
  }
  std::string ck = (dir.path / "ck").string();
  {
    ResumeModule first;
    auto o = resume_opts(dir.str(), 1);
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck})};
    Trainer t(o);
    t.fit(first, make_loader(10, 3, true), make_loader(4, 2));
  }
  ResumeModule resumed;
  Trainer t2(resume_opts(dir.str(), 2));
  t2.fit(resumed, make_loader(10, 3, true), make_loader(4, 2), ck + "/epoch=0-step=4.json");
  EXPECT_EQ(t2.global_step(), 8);
  EXPECT_EQ(resumed.train_steps, 4);  // only the second epoch ran
  expect_bit_equal(straight.w, resumed.w, "w");
  expect_bit_equal(straight.b, resumed.b, "b");
  EXPECT_EQ(t2.optimizers()[0]->param_groups()[0].lr, straight_lr);
}

TEST(CheckpointResume, MidEpochCheckpointResumesLoaderPosition) {
  ScratchDir dir("resume_mid");
  auto opts = [&](int64_t epochs) {
    auto o = resume_opts(dir.str(), epochs);
    o.val_check_interval = 0.5;  // 4 batches per epoch: validation (and a checkpoint) after batch 2
    return o;
  };
  ResumeModule straight;
  {
    Trainer t(opts(2));
    t.fit(straight, make_loader(16, 4, true), make_loader(4, 4));
  }
  std::string ck = (dir.path / "ck").string();
  {
    ResumeModule first;
    auto o = opts(1);
    o.max_steps = 2;  // stop right after the mid-epoch checkpoint
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .save_top_k = -1})};
    Trainer t(o);
    t.fit(first, make_loader(16, 4, true), make_loader(4, 4));
    ASSERT_TRUE(fs::exists(ck + "/epoch=0-step=2.json"));
  }
  ResumeModule resumed;
  Trainer t2(opts(2));
  t2.fit(resumed, make_loader(16, 4, true), make_loader(4, 4), ck + "/epoch=0-step=2");
  EXPECT_EQ(resumed.train_steps, 6);  // 2 remaining batches of epoch 0 + 4 of epoch 1
  EXPECT_EQ(t2.global_step(), 8);
  expect_bit_equal(straight.w, resumed.w, "w");
  expect_bit_equal(straight.b, resumed.b, "b");
}

TEST(CheckpointFormat, FilesContentAndValidity) {
  ScratchDir dir("format");
  ResumeModule m;
  m.save_hyperparameters({{"lr", 0.05}, {"hidden", 3}});
  auto o = resume_opts(dir.str(), 1);
  std::string ck = (dir.path / "ck").string();
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .filename = "c"})};
  Trainer t(o);
  t.fit(m, make_loader(10, 5), make_loader(4, 2));
  // Only the two final files: the atomic writes leave no temporaries behind.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(ck)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"c.json", "c.safetensors"}));

  auto sd = nn::load_safetensors(ck + "/c.safetensors");
  std::set<std::string> keys;
  for (auto& [k, v] : sd) keys.insert(k);
  EXPECT_TRUE(keys.count("w") && keys.count("b"));
  EXPECT_TRUE(keys.count("optimizer.0.state.0.0.exp_avg"));
  expect_bit_equal(sd[0].second, m.w, "saved w");
  auto j = nn::load_json(ck + "/c.json");
  EXPECT_EQ(j.at("epoch").get<int64_t>(), 0);
  EXPECT_EQ(j.at("global_step").get<int64_t>(), 2);
  EXPECT_EQ(j.at("hparams").at("hidden").get<int>(), 3);
  EXPECT_EQ(j.at("schedulers").size(), 2u);
  EXPECT_EQ(j.at("rng").at("seed").get<uint64_t>(), 1234u);
  EXPECT_TRUE(j.at("callbacks").is_object());

  // A checkpoint without its JSON record is incomplete and refused.
  fs::remove(ck + "/c.json");
  ResumeModule r;
  Trainer t2(resume_opts(dir.str(), 2));
  VOLT_EXPECT_ERROR(t2.fit(r, make_loader(10, 5), nullptr, ck + "/c"), "c.json is missing", "complete");

  // test(ckpt_path) loads the weights.
  fs::path logged = fs::path(t.logger()->log_dir()) / "hparams.yaml";
  std::ifstream f(logged);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("hidden: 3"), std::string::npos);
}

TEST(CheckpointFormat, TestLoadsWeightsFromCheckpoint) {
  ScratchDir dir("testckpt");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  std::string ck = (dir.path / "ck").string();
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .filename = "best"})};
  Trainer t(o);
  t.fit(m, make_loader(12, 4));
  auto trained = t.test(m, make_loader(12, 4));
  TinyModule fresh;
  Trainer t2(quiet(dir.str()));
  auto before = t2.test(fresh, make_loader(12, 4));
  auto after = t2.test(fresh, make_loader(12, 4), ck + "/best.safetensors");
  EXPECT_NE(before[0].at("test_loss"), after[0].at("test_loss"));
  EXPECT_DOUBLE_EQ(after[0].at("test_loss"), trained[0].at("test_loss"));
}

TEST(CheckpointResume, ACheckpointInsideAnAccumulationWindowReplaysTheWindowBitExact) {
  // 12 batches per epoch, accumulate 4, validate every 6 batches: the validation after batch 6 (and the
  // checkpoint it triggers) falls inside the window of batches 4-7. The checkpoint resumes at batch 4 with the
  // random state of then, so the replayed window takes the same step and the run ends bit-identical.
  ScratchDir dir("resume_window");
  auto opts = [&](int64_t epochs) {
    auto o = resume_opts(dir.str(), epochs);
    o.accumulate_grad_batches = 4;
    o.val_check_interval = int64_t{6};
    return o;
  };
  ResumeModule straight;
  {
    Trainer t(opts(2));
    t.fit(straight, make_loader(24, 2, true), make_loader(4, 2));
    EXPECT_EQ(t.global_step(), 6);
  }
  const std::string ck = (dir.path / "ck").string();
  {
    ResumeModule first;
    auto o = opts(1);
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .save_top_k = -1})};
    Trainer t(o);
    t.fit(first, make_loader(24, 2, true), make_loader(4, 2));
    ASSERT_TRUE(fs::exists(ck + "/epoch=0-step=1.json"));  // after batch 6: one step taken (batches 0-3)
  }
  const auto record = nlohmann::json::parse(std::ifstream(ck + "/epoch=0-step=1.json"));
  EXPECT_EQ(record.at("batches_done"), 4) << "the checkpoint resumes at the window's first batch";
  ResumeModule resumed;
  Trainer t2(opts(2));
  t2.fit(resumed, make_loader(24, 2, true), make_loader(4, 2), ck + "/epoch=0-step=1");
  EXPECT_EQ(resumed.train_steps, 8 + 12);  // batches 4-11 of epoch 0, then epoch 1
  EXPECT_EQ(t2.global_step(), 6);
  expect_bit_equal(straight.w, resumed.w, "w");
  expect_bit_equal(straight.b, resumed.b, "b");
}
