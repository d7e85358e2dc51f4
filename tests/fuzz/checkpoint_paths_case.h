#pragma once
// One "checkpoint record names a path" case, shared by the fuzz target fuzz_checkpoint_paths and the gtest
// that replays its seed corpus (tests/trainer/test_checkpoint_paths.cpp).
//
// A sandbox under the temp directory holds
//   run/                  the Trainer's default_root_dir; ModelCheckpoints write to run/ckpts
//   run/ckpts/out_link    -> <sandbox>/outside (absolute link), run/ckpts/rel_link -> ../../outside
//   run/ckpts/mine.*      a user's files that are not a Volt checkpoint
//   outside/              a user's files (notes.json, notes.safetensors, user.txt) and a complete Volt
//                         checkpoint (vck.json, vck.safetensors): what no record may make Volt touch
//   base/                 the pristine copies run/ and outside/ are rebuilt from before every case.
// A case takes a JSON array [stateA, stateB]: the ModelCheckpoint states that replace those of a real checkpoint
// (A: no monitor, save_top_k = 1; B: monitor "loss", save_top_k = 2), with "$RUN", "$CKPT" and "$OUT" in any
// string (keys too) expanded to the sandbox's folders. It resumes from that checkpoint for two more epochs (each
// saves and rotates) and then compares every file outside run/ with the snapshot taken before. The oracle: the
// run either finishes or stops with a volt::Error, and nothing outside run/ was deleted, created or changed.
//
// So that a mutated input can never reach a real file even if Volt regressed, every absolute path in the input
// that leaves the sandbox is moved under outside/escaped/, and relative paths are resolved against run/ (the
// process works there while a case runs).
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

namespace volt::fuzz {

namespace paths_case_detail {

namespace fs = std::filesystem;

// y = x . w + b with MSE; logs "loss" for the monitoring checkpoint.
struct LineModule : TrainModule {
  Tensor w, b;
  LineModule() {
    w = register_parameter("w", zeros({2}));
    b = register_parameter("b", zeros({1}));
  }
  std::string type_name() const override { return "LineModule"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    Tensor loss = mse_loss((batch.input * w).sum({1}) + b, batch.target);
    log("loss", loss, {.on_step = false, .on_epoch = true});
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.05}); }
};

inline std::shared_ptr<data::DataLoader> loader() {
  std::vector<float> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(0.25f * i);
    xs.push_back(1.0f - 0.125f * i);
    ys.push_back(0.5f * i - 1.0f);
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {8, 2}), from_vector(ys, {8}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2});
}

inline std::shared_ptr<ModelCheckpoint> checkpoint_a(const fs::path& ckpt) {
  return std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.dirpath = ckpt.string(), .filename = "a-{epoch}-{step}", .save_top_k = 1});
}
inline std::shared_ptr<ModelCheckpoint> checkpoint_b(const fs::path& ckpt) {
  return std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .dirpath = ckpt.string(), .filename = "b-{epoch}-{step}", .monitor = "loss", .save_top_k = 2});
}

inline TrainerOptions options(const fs::path& run, int64_t epochs, std::shared_ptr<ModelCheckpoint> a,
                              std::shared_ptr<ModelCheckpoint> b) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = "1";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.default_root_dir = run.string();
  o.logger = false;
  o.num_sanity_val_steps = 0;
  o.max_epochs = epochs;
  o.callbacks = {std::move(a), std::move(b)};
  return o;
}

// Every entry under `dir` except the subtree `skip`: relative path -> kind, size, mtime and content.
using Snapshot = std::map<std::string, std::string>;
inline Snapshot snapshot(const fs::path& dir, const fs::path& skip) {
  Snapshot out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    std::ostringstream d;
    const auto st = it->symlink_status(ec);
    d << static_cast<int>(st.type());
    if (st.type() == fs::file_type::symlink) {
      d << " -> " << fs::read_symlink(it->path(), ec).string();
    } else if (st.type() == fs::file_type::regular) {
      d << " " << it->file_size(ec) << " " << it->last_write_time(ec).time_since_epoch().count() << " ";
      std::ifstream f(it->path(), std::ios::binary);
      d << f.rdbuf();
    }
    out[fs::relative(it->path(), dir, ec).string()] = d.str();
  }
  return out;
}

inline void copy_tree(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
}

}  // namespace paths_case_detail

struct PathsCaseResult {
  bool ran = false;            ///< the input was a JSON array (other inputs are skipped)
  std::string error;           ///< the volt::Error the resume stopped with, "" when it finished
  std::vector<std::string> changed;  ///< files outside run/ that were deleted, created or changed
  std::string unexpected;      ///< an exception other than volt::Error
};

class PathsSandbox {
 public:
  PathsSandbox() {
    namespace d = paths_case_detail;
    root_ = std::filesystem::temp_directory_path() / ("volt_ckpt_paths_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    const auto base = root_ / "base";
    std::filesystem::create_directories(base / "outside");
    // A real checkpoint of both callbacks after one epoch: the record every case edits.
    const auto run = base / "run", ckpt = run / "ckpts";
    {
      d::LineModule m;
      Trainer t(d::options(run, 1, d::checkpoint_a(ckpt), d::checkpoint_b(ckpt)));
      t.fit(m, d::loader());
    }
    std::ofstream(base / "outside" / "notes.json") << "{\"format\": \"volt-checkpoint\", \"mine\": true}\n";
    std::ofstream(base / "outside" / "notes.safetensors") << "user data";
    std::ofstream(base / "outside" / "user.txt") << "keep me";
    std::filesystem::copy_file(ckpt / "a-0-4.json", base / "outside" / "vck.json");
    std::filesystem::copy_file(ckpt / "a-0-4.safetensors", base / "outside" / "vck.safetensors");
    std::ofstream(ckpt / "mine.json") << "{\"format\": \"notes\"}\n";  // a user's files in the checkpoint folder
    std::ofstream(ckpt / "mine.safetensors") << "user data";
    std::filesystem::create_symlink(root_ / "outside", ckpt / "out_link");
    std::filesystem::create_symlink("../../outside", ckpt / "rel_link");
    record_ = nn::load_json((ckpt / "a-0-4.json").string());
    key_a_ = d::checkpoint_a(ckpt)->state_key();
    key_b_ = d::checkpoint_b(ckpt)->state_key();
  }
  ~PathsSandbox() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path run() const { return root_ / "run"; }
  std::filesystem::path ckpt() const { return root_ / "run" / "ckpts"; }
  std::filesystem::path outside() const { return root_ / "outside"; }

  /// `s` with the placeholders expanded and confined to the sandbox (see the file comment).
  std::string expand(std::string s) const {
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"$CKPT", ckpt().string()},
                               {"$RUN", run().string()}, {"$OUT", outside().string()}})
      for (size_t p = s.find(k); p != std::string::npos; p = s.find(k, p + v.size())) s.replace(p, k.size(), v);
    if (s.empty()) return s;
    const std::filesystem::path p(s);
    const std::filesystem::path abs = (p.is_absolute() ? p : run() / p).lexically_normal();
    const auto rel = abs.lexically_relative(root_);
    if (rel.empty() || *rel.begin() == "..") return (outside() / "escaped" / abs.relative_path()).string();
    return s;
  }

  nlohmann::json expand_json(const nlohmann::json& j) const {
    if (j.is_string()) return expand(j.get<std::string>());
    if (j.is_array()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& e : j) out.push_back(expand_json(e));
      return out;
    }
    if (j.is_object()) {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [k, v] : j.items()) out[expand(k)] = expand_json(v);
      return out;
    }
    return j;
  }

  /// Runs one case: `input` is [stateA, stateB] (either may be missing or null: that state is left out).
  PathsCaseResult run_case(const nlohmann::json& input) const {
    namespace d = paths_case_detail;
    namespace fs = std::filesystem;
    PathsCaseResult r;
    if (!input.is_array()) return r;
    r.ran = true;
    fs::remove_all(run());
    fs::remove_all(outside());
    d::copy_tree(root_ / "base" / "run", run());
    d::copy_tree(root_ / "base" / "outside", outside());
    nlohmann::json rec = record_;
    rec["callbacks"] = nlohmann::json::object();
    if (input.size() > 0 && !input[0].is_null()) rec["callbacks"][key_a_] = expand_json(input[0]);
    if (input.size() > 1 && !input[1].is_null()) rec["callbacks"][key_b_] = expand_json(input[1]);
    nn::save_json_atomic((ckpt() / "a-0-4.json").string(), rec);
    const d::Snapshot before = d::snapshot(root_, run());
    const fs::path cwd = fs::current_path();
    fs::current_path(run());
    try {
      d::LineModule m;
      Trainer t(d::options(run(), 3, d::checkpoint_a(ckpt()), d::checkpoint_b(ckpt())));
      t.fit(m, d::loader(), nullptr, (ckpt() / "a-0-4").string());
    } catch (const Error& e) {
      r.error = e.what();
    } catch (const std::exception& e) {
      r.unexpected = e.what();
    }
    fs::current_path(cwd);
    const d::Snapshot after = d::snapshot(root_, run());
    for (const auto& [k, v] : before)
      if (!after.count(k)) r.changed.push_back("deleted " + k);
      else if (after.at(k) != v) r.changed.push_back("changed " + k);
    for (const auto& [k, v] : after)
      if (!before.count(k)) r.changed.push_back("created " + k);
    return r;
  }

 private:
  std::filesystem::path root_;
  nlohmann::json record_;
  std::string key_a_, key_b_;
};

}  // namespace volt::fuzz
