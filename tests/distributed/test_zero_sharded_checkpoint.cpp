// Sharded checkpoints (checkpoint_layout = sharded) under ZeRO on N ranks (mpirun -np 2 / 3, and alone):
//  - each rank writes its own file under <stem>.shards/, rank 0 the unsharded tensors and the record;
//  - consolidate_checkpoint gives, byte for byte, the full checkpoint the same run writes with layout full;
//  - the checkpoint resumes under zero2 and zero1 (each rank reads its own shards), ddp and a single device
//    (consolidated in memory) with exactly the saved optimizer state;
//  - ModelCheckpoint's top-k rotation removes the shard folders it replaces, and ckpt_path="last" resumes;
//  - a missing, corrupt, foreign or inconsistent shard file is an error naming the file; a rank that cannot
//    read or write its own file stops every rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <volt/distributed/process_group.h>
#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/checkpoint/sharded.h>

#include "distributed/zero_test_module.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }
int world() { return pg().world_size(); }

// A folder every rank agrees on (rank 0's pid in its name).
std::string agreed_dir(const std::string& name) {
  Tensor pid = from_vector<int64_t>({static_cast<int64_t>(::getpid())});
  pg().broadcast(pid, 0);
  return (fs::temp_directory_path() / ("volt_zero_sharded_" + name + "_" + std::to_string(pid.item<int64_t>()))).string();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::vector<double>> as_values(const nn::StateDict& sd) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [k, t] : sd) out[k] = t.to(DType::f64).contiguous().to_vector<double>();
  return out;
}

std::shared_ptr<data::DataLoader> loader_for(Trainer& trainer) {
  // A global batch of 12 at any world size: 2 batches per epoch everywhere.
  const int64_t batch = 12 / trainer.strategy().world_size();
  return std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                            data::DataLoaderOptions{.batch_size = batch, .shuffle = true, .seed = 5});
}

void fit_with(const std::string& strategy, CheckpointLayout layout, TrainModule& m, int64_t steps,
              const std::string& save, const std::string& resume = "", test::CaptureAtStart* capture = nullptr) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_steps = steps;
  o.max_epochs = -1;
  o.seed = 3;
  o.checkpoint_layout = layout;
  o.callbacks.push_back(std::make_shared<test::SaveAtEnd>(save));
  if (capture) o.callbacks.push_back(std::shared_ptr<Callback>(capture, [](Callback*) {}));
  Trainer trainer(o);
  trainer.fit(m, loader_for(trainer), nullptr, resume);
}

std::map<std::string, std::vector<double>> optimizer_tensors(const nn::StateDict& all) {
  nn::StateDict opt;
  for (auto& [k, t] : all)
    if (k.rfind("optimizer.0.", 0) == 0) opt.emplace_back(k.substr(12), t);
  return as_values(opt);
}

double max_abs_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j) d = std::max(d, std::abs(a[i][j] - b[i][j]));
  return d;
}

class ZeroShardedCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = agreed_dir("suite");
    test::ZeroMlp a, b;
    fit_with("zero2", CheckpointLayout::full, a, 5, dir_ + "/full");
    fit_with("zero2", CheckpointLayout::sharded, b, 5, dir_ + "/sharded");
  }
  static void TearDownTestSuite() {
    pg().barrier();
    if (pg().rank() == 0) fs::remove_all(dir_);
  }
  static std::string dir_;
};
std::string ZeroShardedCheckpoint::dir_;

TEST_F(ZeroShardedCheckpoint, EachRankWritesItsShardsAndRankZeroTheRest) {
  const std::string stem = dir_ + "/sharded";
  const nlohmann::json record = nn::load_json(stem + ".json");
  ASSERT_TRUE(is_sharded_record(record));
  const ShardedLayout layout = parse_sharded_record(record, stem + ".json");
  EXPECT_EQ(layout.world_size, world());
  EXPECT_EQ(layout.strategy, "zero2");
  // Two buckets (9 and 20 values) x (exp_avg, exp_avg_sq), each with its chunk.
  ASSERT_EQ(layout.buffers.size(), 4u);
  for (const auto& b : layout.buffers) {
    EXPECT_TRUE(b.numel == 9 || b.numel == 20) << b.key;
    EXPECT_EQ(b.chunk, (b.numel + world() - 1) / world()) << b.key;
    EXPECT_EQ(b.dtype, DType::f64);
  }
  for (int r = 0; r < world(); ++r)
    EXPECT_TRUE(fs::exists(shards_dir(stem) + "/" + shard_file_name(r, world()))) << r;
  EXPECT_FALSE(fs::exists(shards_dir(stem) + "/" + shard_file_name(world(), world() + 1)));
  // This rank's file holds its (chunk,) slices; the main file no moment estimates, only the step counts.
  const auto mine = load_rank_shards(stem, layout, pg().rank());
  EXPECT_EQ(mine.size(), 4u);
  size_t steps = 0;
  for (auto& [k, t] : nn::load_safetensors(stem + ".safetensors")) {
    EXPECT_EQ(k.find("exp_avg"), std::string::npos) << k;
    if (k.find(".step") != std::string::npos) ++steps;
  }
  EXPECT_EQ(steps, 5u);
  // The optimizer state, put back together, is the full checkpoint's.
  EXPECT_EQ(optimizer_tensors(consolidate_tensors(stem, layout)),
            optimizer_tensors(nn::load_safetensors(dir_ + "/full.safetensors")));
  pg().barrier();
}

TEST_F(ZeroShardedCheckpoint, ConsolidatesToTheFullCheckpointByteForByte) {
  if (pg().rank() == 0) {
    consolidate_checkpoint(dir_ + "/sharded", dir_ + "/consolidated");
    const std::string full = file_bytes(dir_ + "/full.safetensors");
    ASSERT_GT(full.size(), 1000u);
    EXPECT_TRUE(file_bytes(dir_ + "/consolidated.safetensors") == full);
    EXPECT_EQ(file_bytes(dir_ + "/consolidated.json"), file_bytes(dir_ + "/full.json"));
    EXPECT_FALSE(fs::exists(dir_ + "/consolidated.shards"));
    try {
      consolidate_checkpoint(dir_ + "/sharded", dir_ + "/sharded");
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is the input"), std::string::npos) << e.what();
    }
  }
  pg().barrier();
}

TEST_F(ZeroShardedCheckpoint, ResumesUnderEveryStrategyWithTheSavedState) {
  const auto saved = optimizer_tensors(nn::load_safetensors(dir_ + "/full.safetensors"));
  std::map<std::string, std::vector<std::vector<double>>> resumed;
  for (const std::string s : {"zero2", "zero1", "ddp", "single_device"}) {
    SCOPED_TRACE(s);
    test::ZeroMlp m;
    test::CaptureAtStart cap;
    // single_device: every rank alone, the way a one-process job loads it (consolidated in memory).
    fit_with(s, CheckpointLayout::full, m, 7, dir_ + "/resumed_" + s + "_" + std::to_string(pg().rank()),
             dir_ + "/sharded", &cap);
    EXPECT_EQ(as_values(cap.opt_state), saved);
    EXPECT_EQ(cap.hyper["state.0.0.step"], 5.0);
    resumed[s] = test::parameter_values(m);
    EXPECT_LE(max_abs_diff(resumed[s], resumed["zero2"]), 1e-12);
    EXPECT_GT(max_abs_diff(resumed[s], cap.params), 1e-6);  // it trained on
  }
}

TEST_F(ZeroShardedCheckpoint, ModelCheckpointRotatesShardFoldersAndResumesLast) {
  const std::string mc_dir = dir_ + "/mc";
  auto fit_mc = [&](int64_t steps, const std::string& ckpt, test::CaptureAtStart* cap) {
    TrainerOptions o = test::zero_options("zero2");
    o.max_steps = steps;
    o.max_epochs = -1;
    o.seed = 3;
    o.enable_checkpointing = true;
    o.default_root_dir = dir_;
    o.checkpoint_layout = CheckpointLayout::sharded;
    o.callbacks.push_back(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.dirpath = mc_dir, .save_top_k = 1, .save_last = true, .every_n_train_steps = 1}));
    if (cap) o.callbacks.push_back(std::shared_ptr<Callback>(cap, [](Callback*) {}));
    Trainer trainer(o);
    test::ZeroMlp m;
    trainer.fit(m, loader_for(trainer), nullptr, ckpt);
  };
  fit_mc(4, "", nullptr);
  pg().barrier();
  std::vector<std::string> records, folders;
  for (auto& e : fs::directory_iterator(mc_dir)) {
    const std::string f = e.path().filename().string();
    if (e.path().extension() == ".json") records.push_back(f);
    if (e.is_directory()) folders.push_back(f);
  }
  std::sort(records.begin(), records.end());
  std::sort(folders.begin(), folders.end());
  EXPECT_EQ(records, (std::vector<std::string>{"epoch=1-step=4.json", "last.json"}));
  EXPECT_EQ(folders, (std::vector<std::string>{"epoch=1-step=4.shards", "last.shards"}));
  // The next fit's rotation replaces this top-k checkpoint: read it first.
  const auto expect = optimizer_tensors(consolidate_tensors(
      mc_dir + "/epoch=1-step=4", parse_sharded_record(nn::load_json(mc_dir + "/epoch=1-step=4.json"), "top-k")));
  pg().barrier();
  test::CaptureAtStart cap;
  fit_mc(6, "last", &cap);
  EXPECT_EQ(cap.hyper["state.0.0.step"], 4.0);
  EXPECT_EQ(as_values(cap.opt_state), expect);
  pg().barrier();
}

// A copy of the sharded checkpoint that `spoil` damages (on rank 0).
std::string spoiled_copy(const std::string& from, const std::string& to,
                         const std::function<void(const std::string& stem)>& spoil) {
  fs::remove_all(to + ".shards");
  fs::copy_file(from + ".json", to + ".json", fs::copy_options::overwrite_existing);
  fs::copy_file(from + ".safetensors", to + ".safetensors", fs::copy_options::overwrite_existing);
  fs::copy(shards_dir(from), shards_dir(to), fs::copy_options::recursive);
  spoil(to);
  return to;
}

// Same size, one byte changed near the end (inside the tensor data).
void flip_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  const char c = static_cast<char>(f.get());
  f.seekp(-3, std::ios::end);
  f.put(static_cast<char>(c ^ 0x5a));
}

void expect_error(const std::string& stem, const std::vector<std::string>& parts) {
  try {
    consolidate_checkpoint(stem, stem + "_out");
    ADD_FAILURE() << "expected an error for " << stem;
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << " in: " << e.what();
  }
}

TEST_F(ZeroShardedCheckpoint, BadShardFilesAreErrorsNamingTheFile) {
  const std::string src = dir_ + "/sharded";
  const std::string last = shard_file_name(world() - 1, world());
  if (pg().rank() == 0) {
    expect_error(spoiled_copy(src, dir_ + "/missing", [&](const std::string& s) { fs::remove(shards_dir(s) + "/" + last); }),
                 {"missing.shards/" + last, "is missing"});
    expect_error(spoiled_copy(src, dir_ + "/flipped", [&](const std::string& s) { flip_byte(shards_dir(s) + "/" + last); }),
                 {"flipped.shards/" + last, "corrupt"});
    const std::string foreign = shard_file_name(0, world() + 1);
    expect_error(spoiled_copy(src, dir_ + "/foreign",
                              [&](const std::string& s) {
                                fs::copy_file(shards_dir(s) + "/" + shard_file_name(0, world()), shards_dir(s) + "/" + foreign);
                              }),
                 {"foreign.shards/" + foreign, "belongs to a checkpoint of " + std::to_string(world() + 1) + " ranks"});
    auto edit_record = [](const std::string& s, const std::function<void(nlohmann::json&)>& f) {
      nlohmann::json j = nn::load_json(s + ".json");
      f(j);
      nn::save_json_atomic(s + ".json", j);
    };
    expect_error(spoiled_copy(src, dir_ + "/renamed",
                              [&](const std::string& s) {
                                edit_record(s, [](nlohmann::json& j) { j["sharded"]["buffers"][0]["key"] = "optimizer.0.flat.9.9.x"; });
                              }),
                 {"renamed.shards/" + shard_file_name(0, world()), "no tensor 'optimizer.0.flat.9.9.x'"});
    expect_error(spoiled_copy(src, dir_ + "/retyped",
                              [&](const std::string& s) {
                                edit_record(s, [](nlohmann::json& j) { j["sharded"]["buffers"][1]["dtype"] = "F32"; });
                              }),
                 {"retyped.shards/" + shard_file_name(0, world()), "float32"});
    expect_error(spoiled_copy(src, dir_ + "/resized",
                              [&](const std::string& s) {
                                edit_record(s, [](nlohmann::json& j) { j["sharded"]["world_size"] = 7; });
                              }),
                 {"resized.json", "one file per rank (7)"});
  }
  pg().barrier();
  // Resuming from a checkpoint with a missing shard: every rank fails alike, naming the file.
  const std::string broken = dir_ + "/broken";
  if (pg().rank() == 0) spoiled_copy(src, broken, [&](const std::string& s) { fs::remove(shards_dir(s) + "/" + last); });
  pg().barrier();
  for (const std::string s : {"zero2", "ddp"}) {
    test::ZeroMlp m;
    try {
      fit_with(s, CheckpointLayout::full, m, 7, dir_ + "/never_" + s, broken);
      ADD_FAILURE() << "expected an error under " << s;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken.shards/" + last), std::string::npos) << e.what();
    }
  }
  pg().barrier();
  // The last rank's own file corrupt: under zero2 only that rank reads it (the direct path), and every rank
  // still fails (the others saying so) instead of waiting for it; under ddp every rank checks every file.
  const std::string corrupt = dir_ + "/corrupt";
  if (pg().rank() == 0) spoiled_copy(src, corrupt, [&](const std::string& s) { flip_byte(shards_dir(s) + "/" + last); });
  pg().barrier();
  for (const std::string s : {"zero2", "ddp"}) {
    test::ZeroMlp m;
    try {
      fit_with(s, CheckpointLayout::full, m, 7, dir_ + "/never_" + s, corrupt);
      ADD_FAILURE() << "expected an error under " << s;
    } catch (const Error& e) {
      const std::string msg = e.what();
      const bool named = msg.find("corrupt.shards/" + last) != std::string::npos && msg.find("is corrupt") != std::string::npos;
      // Under zero2 at the same world size each rank reads only its own file: the others learn of it.
      if (s == "zero2" && pg().rank() != world() - 1)
        EXPECT_NE(msg.find("another rank could not read its shard file"), std::string::npos) << s << ": " << msg;
      else
        EXPECT_TRUE(named) << s << ": " << msg;
    }
  }
  pg().barrier();
}

TEST_F(ZeroShardedCheckpoint, RecordsThatContradictThemselvesAreRefused) {
  const nlohmann::json good = nn::load_json(dir_ + "/sharded.json");
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& part) {
    nlohmann::json j = good;
    edit(j["sharded"]);
    try {
      parse_sharded_record(j, "edited.json");
      ADD_FAILURE() << "expected an error mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("edited.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(parse_sharded_record(good, "good.json"));
  refused([](nlohmann::json& s) { s["buffers"][0]["chunk"] = s["buffers"][0]["numel"].get<int64_t>() + 1; },
          "expected chunk = ceil(numel / world_size)");
  refused([](nlohmann::json& s) { s["buffers"][0]["slots"][0]["offset"] = s["buffers"][0]["numel"]; }, "does not fit");
  refused([](nlohmann::json& s) { s["buffers"][0]["slots"][0]["shape"] = {1u << 30, 1u << 30, 1u << 30}; },
          "does not fit");
  refused([](nlohmann::json& s) { s["order"].erase(s["order"].size() - 1); }, "is not named in 'sharded.order'");
  refused([](nlohmann::json& s) { s["files"][0]["file"] = "rank-1-of-9.safetensors"; }, "expected \"rank-0-of-");
  refused([](nlohmann::json& s) { s["buffers"][0]["dtype"] = "F7"; }, "has dtype \"F7\"");
}

TEST_F(ZeroShardedCheckpoint, ARankThatCannotWriteItsShardsStopsEveryRank) {
  // The last rank's file cannot be renamed into place (a folder sits there); the others wrote theirs.
  const std::string stem = dir_ + "/unwritable";
  const std::string last = shards_dir(stem) + "/" + shard_file_name(world() - 1, world());
  if (pg().rank() == 0) {
    fs::create_directories(last);
    std::ofstream(last + "/keep") << "x";
  }
  pg().barrier();
  test::ZeroMlp m;
  try {
    fit_with("zero2", CheckpointLayout::sharded, m, 2, stem);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (pg().rank() == world() - 1) EXPECT_NE(msg.find(shard_file_name(world() - 1, world())), std::string::npos) << msg;
    else EXPECT_NE(msg.find("another rank could not write its shard file"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(stem + ".json"));  // never complete
  pg().barrier();
}

// Under strategies without shards the option writes the ordinary full checkpoint.
TEST(ZeroShardedCheckpointDdp, DdpWithShardedLayoutWritesTheFullLayout) {
  const std::string dir = agreed_dir("ddp");
  test::ZeroMlp m;
  fit_with("ddp", CheckpointLayout::sharded, m, 2, dir + "/ddp");
  if (pg().rank() == 0) {
    EXPECT_FALSE(is_sharded_record(nn::load_json(dir + "/ddp.json")));
    EXPECT_FALSE(fs::exists(dir + "/ddp.shards"));
    EXPECT_EQ(optimizer_tensors(nn::load_safetensors(dir + "/ddp.safetensors")).size(), 15u);
  }
  pg().barrier();
  if (pg().rank() == 0) fs::remove_all(dir);
}

TEST(ZeroShardedCheckpointDdp, LayoutNames) {
  EXPECT_EQ(parse_checkpoint_layout("sharded"), CheckpointLayout::sharded);
  EXPECT_EQ(name(CheckpointLayout::full), "full");
  try {
    parse_checkpoint_layout("per-rank");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint_layout=\"per-rank\" is not one of \"full\", \"sharded\""),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
