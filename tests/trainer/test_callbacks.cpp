// EarlyStopping decisions and ModelCheckpoint file sets.
#include <cmath>
#include <limits>

#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

TEST(EarlyStoppingRule, PatienceAndMinDelta) {
  EarlyStopping es({.monitor = "l", .patience = 2});
  EXPECT_FALSE(es.evaluate(1.0));
  EXPECT_FALSE(es.evaluate(0.9));
  EXPECT_FALSE(es.evaluate(0.95));
  EXPECT_EQ(es.wait_count(), 1);
  EXPECT_TRUE(es.evaluate(0.92));
  EXPECT_DOUBLE_EQ(es.best_score(), 0.9);

  EarlyStopping d({.monitor = "l", .min_delta = 0.1, .patience = 1});
  EXPECT_FALSE(d.evaluate(1.0));
  EXPECT_TRUE(d.evaluate(0.95));  // better, but not by more than min_delta
  EarlyStopping d2({.monitor = "l", .min_delta = 0.1, .patience = 1});
  EXPECT_FALSE(d2.evaluate(1.0));
  EXPECT_FALSE(d2.evaluate(0.85));
  EXPECT_DOUBLE_EQ(d2.best_score(), 0.85);
}

TEST(EarlyStoppingRule, ModeMaxAndThresholds) {
  EarlyStopping mx({.monitor = "acc", .patience = 1, .mode = "max"});
  EXPECT_FALSE(mx.evaluate(0.5));
  EXPECT_FALSE(mx.evaluate(0.6));
  EXPECT_TRUE(mx.evaluate(0.55));

  EarlyStopping st({.monitor = "l", .patience = 10, .stopping_threshold = 0.5});
  EXPECT_FALSE(st.evaluate(0.7));
  std::string why;
  EXPECT_TRUE(st.evaluate(0.4, &why));
  EXPECT_NE(why.find("threshold"), std::string::npos);

  EarlyStopping dv({.monitor = "l", .patience = 10, .divergence_threshold = 10.0});
  EXPECT_FALSE(dv.evaluate(5.0));
  EXPECT_TRUE(dv.evaluate(11.0, &why));
  EXPECT_NE(why.find("divergence"), std::string::npos);
}

TEST(EarlyStoppingRule, NonFinite) {
  EarlyStopping es({.monitor = "l", .patience = 5});
  EXPECT_FALSE(es.evaluate(1.0));
  std::string why;
  EXPECT_TRUE(es.evaluate(std::numeric_limits<double>::quiet_NaN(), &why));
  EXPECT_NE(why.find("not finite"), std::string::npos);
  EarlyStopping lax({.monitor = "l", .patience = 5, .check_finite = false});
  EXPECT_FALSE(lax.evaluate(1.0));
  EXPECT_FALSE(lax.evaluate(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(lax.wait_count(), 1);
  VOLT_EXPECT_ERROR(EarlyStopping({.monitor = "l", .mode = "up"}), "mode", "up");
}

namespace {
// Logs val_loss = seq[epoch] in every validation step.
void log_sequence(TinyModule& m, std::vector<double> seq) {
  m.on_val_step = [seq](TinyModule& mm, const Batch&, int64_t, const Tensor&) {
    mm.log("val_loss", seq.at(std::min<size_t>(mm.current_epoch(), seq.size() - 1)));
  };
}
}  // namespace

TEST(EarlyStoppingFit, StopsAfterPatienceAndHonoursMinEpochs) {
  ScratchDir dir("es");
  {
    TinyModule m;
    log_sequence(m, {1.0});
    auto o = quiet(dir.str());
    o.max_epochs = 20;
    auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss", .patience = 2});
    o.callbacks = {es};
    Trainer t(o);
    t.fit(m, make_loader(8, 4), make_loader(4, 4));
    EXPECT_EQ(t.validation_runs(), 3);
    EXPECT_EQ(t.current_epoch(), 3);
    EXPECT_EQ(es->stopped_epoch(), 2);
  }
  {
    TinyModule m;
    log_sequence(m, {1.0});
    auto o = quiet(dir.str());
    o.max_epochs = 20;
    o.min_epochs = 5;
    o.callbacks = {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss", .patience = 2})};
    Trainer t(o);
    t.fit(m, make_loader(8, 4), make_loader(4, 4));
    EXPECT_EQ(t.current_epoch(), 5);
  }
  {
    TinyModule m;
    log_sequence(m, {1.0});
    auto o = quiet(dir.str());
    o.max_epochs = 3;
    o.callbacks = {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "missing"})};
    Trainer t(o);
    VOLT_EXPECT_ERROR(t.fit(m, make_loader(8, 4), make_loader(4, 4)), "missing", "val_loss");
  }
  {  // Without a validation loop it checks at train epoch end; NaN stops at once.
    TinyModule m;
    m.on_train_epoch_end_fn = [](TinyModule& mm) {
      mm.log("train_metric", mm.current_epoch() == 1 ? std::nan("") : 1.0);
    };
    auto o = quiet(dir.str());
    o.max_epochs = 10;
    o.callbacks = {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "train_metric", .patience = 5})};
    Trainer t(o);
    t.fit(m, make_loader(8, 4));
    EXPECT_EQ(t.current_epoch(), 2);
  }
}

namespace {
std::set<std::string> files_in(const fs::path& d) {
  std::set<std::string> out;
  if (!fs::exists(d)) return out;
  for (auto& e : fs::directory_iterator(d)) out.insert(e.path().filename().string());
  return out;
}
}  // namespace

TEST(ModelCheckpointFit, TopKByMonitorKeepsBestFiles) {
  ScratchDir dir("ckpt_topk");
  TinyModule m;
  log_sequence(m, {0.5, 0.3, 0.4, 0.1, 0.6});
  auto o = quiet(dir.str());
  o.max_epochs = 5;
  auto ck = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .dirpath = (dir.path / "ck").string(), .monitor = "val_loss", .save_top_k = 2, .save_last = true});
  o.callbacks = {ck};
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(4, 4));  // 2 steps per epoch
  std::set<std::string> want = {"epoch=1-step=4.json", "epoch=1-step=4.safetensors", "epoch=3-step=8.json",
                                "epoch=3-step=8.safetensors", "last.json", "last.safetensors"};
  EXPECT_EQ(files_in(dir.path / "ck"), want);
  EXPECT_EQ(ck->best_model_path(), (dir.path / "ck" / "epoch=3-step=8").string());
  EXPECT_DOUBLE_EQ(ck->best_model_score(), 0.1);
}

TEST(ModelCheckpointFit, NoMonitorKeepsLatestOrAll) {
  ScratchDir dir("ckpt_latest");
  for (int64_t k : {1, -1, 0}) {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 3;
    std::string d = (dir.path / ("k" + std::to_string(k))).string();
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = d, .save_top_k = k})};
    Trainer t(o);
    t.fit(m, make_loader(8, 4));
    std::set<std::string> want;
    if (k == 1) want = {"epoch=2-step=6.json", "epoch=2-step=6.safetensors"};
    if (k == -1)
      for (int e = 0; e < 3; ++e)
        for (const char* ext : {".json", ".safetensors"})
          want.insert("epoch=" + std::to_string(e) + "-step=" + std::to_string(2 * (e + 1)) + ext);
    EXPECT_EQ(files_in(d), want) << "save_top_k=" << k;
  }
}

TEST(ModelCheckpointFit, TemplateEveryNEpochsAndDefaultCallback) {
  EXPECT_EQ(ModelCheckpoint::format_name("{epoch}-{val_loss:.2f}", 3, 10, {{"val_loss", 0.12345}}), "3-0.12");
  EXPECT_EQ(ModelCheckpoint::format_name("epoch={epoch}-step={step}", 0, 7, {}), "epoch=0-step=7");
  VOLT_EXPECT_ERROR(ModelCheckpoint::format_name("{nope}", 0, 0, {}), "nope");

  ScratchDir dir("ckpt_every");
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 4;
    std::string d = (dir.path / "every").string();
    o.callbacks = {std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.dirpath = d, .filename = "e{epoch}", .save_top_k = -1, .every_n_epochs = 2})};
    Trainer t(o);
    t.fit(m, make_loader(8, 4));
    EXPECT_EQ(files_in(d), (std::set<std::string>{"e1.json", "e1.safetensors", "e3.json", "e3.safetensors"}));
  }
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 2;
    o.enable_checkpointing = true;
    Trainer t(o);
    t.fit(m, make_loader(8, 4));
    EXPECT_EQ(files_in(fs::path(t.logger()->log_dir()) / "checkpoints"),
              (std::set<std::string>{"epoch=1-step=4.json", "epoch=1-step=4.safetensors"}));
  }
}

TEST(ModelCheckpointFit, ResumeIntoNewVersionKeepsOldFilesAndStateListsItself) {
  ScratchDir dir("ckpt_resume");
  std::string first_stem;
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    o.enable_checkpointing = true;
    Trainer t(o);
    t.fit(m, make_loader(8, 4));
    first_stem = t.logger()->log_dir() + "/checkpoints/epoch=0-step=2";
  }
  auto j = nn::load_json(first_stem + ".json");
  bool lists_itself = false;
  for (auto& [k, v] : j.at("callbacks").items())
    if (k.rfind("ModelCheckpoint", 0) == 0) lists_itself = v.at("best_k_models").contains(first_stem);
  EXPECT_TRUE(lists_itself);
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.enable_checkpointing = true;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), nullptr, first_stem);
  EXPECT_TRUE(fs::exists(first_stem + ".safetensors"));  // not deleted by the resumed run
  EXPECT_TRUE(fs::exists(t.logger()->log_dir() + "/checkpoints/epoch=1-step=4.json"));
}
