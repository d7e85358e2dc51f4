// Bad checkpoints are volt::Errors naming the file and the key: the trainer-state record (parse_trainer_state),
// optimizer tensor names, stored dtypes, positions outside the run; stale files of killed writes are cleaned;
// the throughput totals survive a resume.
#include <signal.h>
#include <sys/wait.h>

#include <volt/nn/serialization.h>
#include <volt/trainer/checkpoint/record.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/callbacks/throughput_monitor.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json good_record() {
  return json::parse(R"({
    "format": "volt-checkpoint", "version": 1, "epoch": 0, "global_step": 4, "batches_done": 4,
    "epoch_batches": 4,
    "optimizers": [{"type": "SGD", "hyper": {"group.0.lr": 0.1}}],
    "schedulers": [{"type": "StepLR", "interval": "epoch", "frequency": 1, "state": {"last_epoch": 1}}],
    "callbacks": {}, "rng": {"seed": 7, "offset": 12}, "loader": {"epoch": 0, "batches_consumed": 4},
    "hparams": {}})");
}

// Writes a 1-epoch checkpoint <dir>/ck of a TinyModule (SGD, 4 batches) and returns its stem.
std::string write_checkpoint(const ScratchDir& dir, std::shared_ptr<Callback> extra = nullptr) {
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir.str(), .filename = "ck"})};
  if (extra) o.callbacks.push_back(extra);
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  return (dir.path / "ck").string();
}

// Resumes a fresh TinyModule from `stem` for `epochs` max epochs.
void resume(const std::string& stem, const std::string& dir, int64_t epochs = 2) {
  TinyModule m;
  auto o = quiet(dir);
  o.max_epochs = epochs;
  Trainer t(o);
  t.fit(m, make_loader(8, 2), nullptr, stem);
}

void edit_json(const std::string& stem, const std::function<void(json&)>& f) {
  json j = nn::load_json(stem + ".json");
  f(j);
  nn::save_json_atomic(stem + ".json", j);
}

}  // namespace

TEST(TrainerStateRecord, ParsesAGoodRecord) {
  TrainerStateRecord r = parse_trainer_state(good_record(), "good.json");
  EXPECT_EQ(r.global_step, 4);
  EXPECT_EQ(r.epoch_batches, 4);
  ASSERT_EQ(r.optimizers.size(), 1u);
  EXPECT_EQ(r.optimizers[0].type, "SGD");
  EXPECT_DOUBLE_EQ(r.optimizers[0].hyper.at("group.0.lr"), 0.1);
  ASSERT_EQ(r.schedulers.size(), 1u);
  EXPECT_EQ(r.schedulers[0].interval, SchedulerInterval::epoch);
  EXPECT_EQ(r.rng_seed, 7u);
  EXPECT_EQ(r.rng_offset, 12u);
}

TEST(TrainerStateRecord, EveryBadKeyIsNamed) {
  struct Row {
    std::function<void(json&)> edit;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {[](json& j) { j.erase("epoch"); }, {"src.json", "no key 'epoch'"}},
      {[](json& j) { j["epoch"] = "3"; }, {"'epoch'", "must be an integer", "string"}},
      {[](json& j) { j["epoch"] = -1; }, {"'epoch' = -1", "out of range", "0 to"}},
      {[](json& j) { j["epoch"] = -9223372036854775807LL; }, {"'epoch'", "out of range"}},
      {[](json& j) { j["epoch"] = 18446744073709551615ULL; }, {"'epoch'", "18446744073709551615", "out of range"}},
      {[](json& j) { j["global_step"] = -5; }, {"'global_step' = -5", "out of range"}},
      {[](json& j) { j["global_step"] = 1.5; }, {"'global_step'", "must be an integer"}},
      {[](json& j) { j["batches_done"] = -1; }, {"'batches_done' = -1", "out of range"}},
      {[](json& j) { j["batches_done"] = 5; }, {"'batches_done' = 5", "exceeds 'epoch_batches' = 4"}},
      {[](json& j) { j.erase("epoch_batches"); }, {"no key 'epoch_batches'"}},
      {[](json& j) { j["format"] = "other"; }, {"'format'", "volt-checkpoint"}},
      {[](json& j) { j["version"] = 9; }, {"'version' = 9", "out of range"}},
      {[](json& j) { j["optimizers"] = json::object(); }, {"'optimizers' must be an array"}},
      {[](json& j) { j["optimizers"][0].erase("type"); }, {"no key 'optimizers[0].type'"}},
      {[](json& j) { j["optimizers"][0]["hyper"]["group.0.lr"] = "x"; }, {"'optimizers[0].hyper.group.0.lr'", "number"}},
      {[](json& j) { j["optimizers"][0] = 3; }, {"'optimizers[0]' must be an object"}},
      {[](json& j) { j["schedulers"][0]["interval"] = "hour"; }, {"schedulers[0].interval", "\"hour\"", "\"step\""}},
      {[](json& j) { j["schedulers"][0]["frequency"] = 0; }, {"'schedulers[0].frequency' = 0", "out of range"}},
      {[](json& j) { j["schedulers"][0]["state"] = json::array(); }, {"'schedulers[0].state'", "object of numbers"}},
      {[](json& j) { j["callbacks"] = json::array(); }, {"'callbacks' must be an object"}},
      {[](json& j) { j["rng"]["seed"] = -1; }, {"'rng.seed'", "non-negative integer"}},
      {[](json& j) { j["rng"].erase("offset"); }, {"no key 'rng.offset'"}},
      {[](json& j) { j["rng"]["offset"] = 1.5; }, {"'rng.offset'", "non-negative integer"}},
      {[](json& j) { j.erase("hparams"); }, {"no key 'hparams'"}},
      {[](json& j) { j["loader"]["batches_consumed"] = 2; }, {"'loader'", "disagrees"}},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    json j = good_record();
    rows[i].edit(j);
    try {
      parse_trainer_state(j, "src.json");
      ADD_FAILURE() << "row " << i << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("src.json"), std::string::npos) << e.what();
      for (const auto& w : rows[i].words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << "'" << e.what() << "' lacks '" << w << "'";
    }
  }
  VOLT_EXPECT_ERROR(parse_trainer_state(json::array(), "fuzz"), "fuzz", "JSON object");
  VOLT_EXPECT_ERROR(parse_trainer_state(json(), "fuzz"), "fuzz", "JSON object");
}

TEST(TrainerStateRecord, OptimizerKeys) {
  std::string rest;
  EXPECT_EQ(parse_optimizer_key("optimizer.0.state.0.1.exp_avg", "f", &rest), 0u);
  EXPECT_EQ(rest, "state.0.1.exp_avg");
  EXPECT_EQ(parse_optimizer_key("optimizer.12.x", "f"), 12u);
  for (const char* bad : {"optimizer.abc.x", "optimizer.99999999999999999999.x", "optimizer.-1.x", "optimizer.1",
                          "optimizer.1.", "optimizer..x", "optimizer. 1.x"})
    VOLT_EXPECT_ERROR(parse_optimizer_key(bad, "f.safetensors"), "f.safetensors", bad);
}

TEST(CheckpointValidation, ResumeOfACorruptRecordNamesFileAndKey) {
  ScratchDir dir("ckval_record");
  const std::string stem = write_checkpoint(dir);
  const json orig = nn::load_json(stem + ".json");
  auto reset = [&] { nn::save_json_atomic(stem + ".json", orig); };
  edit_json(stem, [](json& j) { j.erase("global_step"); });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.json", "no key 'global_step'");
  reset();
  edit_json(stem, [](json& j) { j["optimizers"][0]["type"] = 5; });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.json", "'optimizers[0].type' must be a string");
  reset();
  edit_json(stem, [](json& j) { j["epoch"] = -4; });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.json", "'epoch' = -4");
  reset();
  // A huge epoch used to skip training and report success; a negative one to train extra epochs.
  edit_json(stem, [](json& j) { j["epoch"] = 1000000; j["loader"]["epoch"] = 1000000; });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.json", "resumes at epoch 1000001", "max_epochs=2");
  reset();
  edit_json(stem, [](json& j) { j["batches_done"] = -1; j["loader"]["batches_consumed"] = -1; });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "'batches_done' = -1");
  reset();
  // Mid-epoch position with another batch count than the loader now has.
  edit_json(stem, [](json& j) { j["batches_done"] = 2; j["epoch_batches"] = 7; j["loader"]["batches_consumed"] = 2; });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "batch 2 of an epoch of 7", "now has 4");
  reset();
  edit_json(stem, [](json& j) { j["global_step"] = 50; });
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = -1;
    o.max_steps = 10;
    Trainer t(o);
    VOLT_EXPECT_ERROR(t.fit(m, make_loader(8, 2), nullptr, stem), "global_step 50", "max_steps=10");
  }
  reset();
  // The record is fine: a resume with max_epochs 2 trains the second epoch.
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 2;
    Trainer t(o);
    t.fit(m, make_loader(8, 2), nullptr, stem);
    EXPECT_EQ(t.global_step(), 8);
    EXPECT_EQ(t.current_epoch(), 2);
  }
}

TEST(CheckpointValidation, BadOptimizerKeysAndDtypesInTheTensorFile) {
  ScratchDir dir("ckval_tensors");
  const std::string stem = write_checkpoint(dir);
  const std::string st = stem + ".safetensors";
  const nn::StateDict orig = nn::load_safetensors(st);
  // A weights file edited after the fact: the record's digest would catch any change first, so it is dropped
  // (as in a record written before digests existed) to reach the key and dtype checks behind it.
  nlohmann::json record = nn::load_json(stem + ".json");
  record.erase("safetensors_digest");
  nn::save_json_atomic(stem + ".json", record);
  auto write_with = [&](const std::function<void(nn::StateDict&)>& f) {
    nn::StateDict sd = orig;
    f(sd);
    nn::save_safetensors(st, sd, {{"format", "volt-checkpoint"}});
  };
  write_with([](nn::StateDict& sd) { sd.emplace_back("optimizer.abc.x", zeros({1})); });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.safetensors", "'optimizer.abc.x'", "malformed");
  write_with([](nn::StateDict& sd) { sd.emplace_back("optimizer.99999999999999999999.x", zeros({1})); });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "ck.safetensors", "optimizer.99999999999999999999.x");
  write_with([](nn::StateDict& sd) { sd.emplace_back("optimizer.7.state.0.0.momentum_buffer", zeros({3})); });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "state for optimizer 7", "returned 1");
  write_with([](nn::StateDict& sd) {
    for (auto& [k, t] : sd)
      if (k == "w") t = t.to(DType::i32);
  });
  VOLT_EXPECT_ERROR(resume(stem, dir.str()), "dtype mismatch", "w (expected float32, got int32)");
}

TEST(CheckpointValidation, MalformedCallbackStateIsAnError) {
  ScratchDir dir("ckval_cb");
  auto tp = std::make_shared<ThroughputMonitor>();
  const std::string stem = write_checkpoint(dir, tp);
  edit_json(stem, [](json& j) { j["callbacks"]["ThroughputMonitor"] = {{"samples", "many"}, {"seconds", 1}}; });
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.callbacks = {std::make_shared<ThroughputMonitor>()};
  Trainer t(o);
  VOLT_EXPECT_ERROR(t.fit(m, make_loader(8, 2), nullptr, stem), "ThroughputMonitor", "samples");
}

TEST(CheckpointValidation, ThroughputTotalsIncludeThePreResumePart) {
  ScratchDir dir("ckval_tp");
  auto before = std::make_shared<ThroughputMonitor>();
  const std::string stem = write_checkpoint(dir, before);
  EXPECT_EQ(before->samples(), 8);
  const double secs = before->seconds();
  auto after = std::make_shared<ThroughputMonitor>();
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 3;
  o.callbacks = {after};
  Trainer t(o);
  t.fit(m, make_loader(8, 2), nullptr, stem);
  EXPECT_EQ(after->samples(), 24);  // 3 epochs of 8 samples, one of them before the resume
  EXPECT_GE(after->seconds(), secs);
  json state = after->state_dict();
  EXPECT_EQ(state["samples"].get<int64_t>(), 24);
}

TEST(CheckpointFiles, CleanupRemovesOnlyStaleLeftovers) {
  ScratchDir dir("ckval_cleanup");
  const std::string stem = write_checkpoint(dir);  // complete checkpoint "ck": must survive
  const fs::path d = dir.path;
  auto touch = [](const fs::path& p, const std::string& s = "x") { std::ofstream(p) << s; };
  // A pid that is not alive: fork a child that exits at once and reap it.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string dead_s = std::to_string(dead), live_s = std::to_string(::getpid());
  touch(d / (".ck.json.tmp." + dead_s + ".3"));
  touch(d / (".epoch=0-step=4.safetensors.tmp." + dead_s + ".0"));
  touch(d / (".ck.json.tmp." + live_s + ".1"));          // a live writer: kept
  touch(d / (".notes.tmp.x.1"));                           // not the pattern: kept
  touch(d / "user.txt");
  // An orphan checkpoint tensor file (killed between the .safetensors and the .json), and a foreign one.
  nn::save_safetensors((d / "epoch=1-step=8.safetensors").string(), {{"w", zeros({2})}}, {{"format", "volt-checkpoint"}});
  nn::save_safetensors((d / "weights.safetensors").string(), {{"w", zeros({2})}});
  // Shard folders of sharded checkpoints: an orphan (no record) goes; the complete checkpoint's stays, and so
  // does a folder holding anything but rank files.
  fs::create_directories(d / "epoch=2-step=12.shards");
  touch(d / "epoch=2-step=12.shards" / "rank-0-of-2.safetensors");
  touch(d / "epoch=2-step=12.shards" / (".rank-1-of-2.safetensors.tmp." + dead_s + ".0"));
  fs::create_directories(d / "ck.shards");
  touch(d / "ck.shards" / "rank-0-of-1.safetensors");
  fs::create_directories(d / "notes.shards");
  touch(d / "notes.shards" / "rank-0-of-1.safetensors");
  touch(d / "notes.shards" / "readme.txt");
  // Everything is fresh: with the default age guard nothing is removed.
  EXPECT_TRUE(cleanup_stale_checkpoint_files(d.string()).empty());
  std::vector<std::string> removed = cleanup_stale_checkpoint_files(d.string(), std::chrono::seconds(0));
  std::set<std::string> names;
  for (auto& r : removed) names.insert(fs::path(r).filename().string());
  EXPECT_EQ(names, (std::set<std::string>{".ck.json.tmp." + dead_s + ".3",
                                          ".epoch=0-step=4.safetensors.tmp." + dead_s + ".0",
                                          "epoch=1-step=8.safetensors", "epoch=2-step=12.shards"}));
  EXPECT_FALSE(fs::exists(d / "epoch=2-step=12.shards"));
  EXPECT_TRUE(fs::exists(d / "ck.shards" / "rank-0-of-1.safetensors"));
  EXPECT_TRUE(fs::exists(d / "notes.shards" / "readme.txt"));
  EXPECT_TRUE(fs::exists(stem + ".json"));
  EXPECT_TRUE(fs::exists(stem + ".safetensors"));
  EXPECT_TRUE(fs::exists(d / (".ck.json.tmp." + live_s + ".1")));
  EXPECT_TRUE(fs::exists(d / ".notes.tmp.x.1"));
  EXPECT_TRUE(fs::exists(d / "user.txt"));
  EXPECT_TRUE(fs::exists(d / "weights.safetensors"));
  EXPECT_TRUE(cleanup_stale_checkpoint_files((d / "missing").string(), std::chrono::seconds(0)).empty());
}

TEST(CheckpointFiles, ModelCheckpointCleansItsDirectoryOnStart) {
  ScratchDir dir("ckval_mc");
  const fs::path d = dir.path / "cks";
  fs::create_directories(d);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path tmp = d / (".last.json.tmp." + std::to_string(dead) + ".0");
  std::ofstream(tmp) << "partial";
  const fs::path orphan = d / "epoch=5-step=40.safetensors";
  nn::save_safetensors(orphan.string(), {{"w", zeros({2})}}, {{"format", "volt-checkpoint"}});
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(tmp, old);
  fs::last_write_time(orphan, old);
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = d.string()})};
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(d / "epoch=0-step=4.json"));
  EXPECT_TRUE(fs::exists(d / "epoch=0-step=4.safetensors"));
}
