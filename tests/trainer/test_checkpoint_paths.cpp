// A checkpoint record is untrusted input: the paths in a ModelCheckpoint state cannot make Volt delete, overwrite
// or create a file outside the run's checkpoint directory (the sandbox and oracle of tests/fuzz/
// checkpoint_paths_case.h, and its seed corpus replayed); optimizer hyper-state from a record passes the
// constructors' range checks; a resume cleans the leftovers of killed writes next to the checkpoint it resumes.
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz/checkpoint_paths_case.h"
#include "trainer/trainer_test_util.h"
#include <volt/trainer/checkpoint/files.h>

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fuzz::PathsSandbox& sandbox() {
  static const fuzz::PathsSandbox s;
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "; ";
  return out;
}

// Runs `input` and checks the oracle; returns the result for case-specific checks.
fuzz::PathsCaseResult run(const std::string& input) {
  fuzz::PathsCaseResult r = sandbox().run_case(json::parse(input));
  EXPECT_TRUE(r.ran);
  EXPECT_TRUE(r.changed.empty()) << "files outside the run changed: " << joined(r.changed);
  EXPECT_TRUE(r.unexpected.empty()) << r.unexpected;
  return r;
}

void expect_error(const fuzz::PathsCaseResult& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.error.empty()) << "the resume was expected to be refused";
  for (const auto& p : parts)
    EXPECT_NE(r.error.find(p), std::string::npos) << "'" << r.error << "' lacks '" << p << "'";
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

// The probe's N1: an empty dirpath and paths naming a user's files elsewhere. Before, the resumed run deleted
// outside/notes.json and outside/notes.safetensors and exited 0.
TEST(CheckpointPaths, RecordNamingFilesElsewhereWithEmptyDirpathIsRefused) {
  const auto r = run(R"([{"dirpath": "", "latest_path": "$OUT/notes", "best_model_path": "$OUT/notes",
                          "best_k_models": {"$OUT/notes": null}}, null])");
  expect_error(r, {"best_k_models", "dirpath\" is empty", (sandbox().outside() / "notes").string(), "a-0-4.json"});
  EXPECT_TRUE(fs::exists(sandbox().outside() / "notes.json"));
  EXPECT_TRUE(fs::exists(sandbox().outside() / "notes.safetensors"));
}

// With the key removed, the record named the checkpoint it came from, and the resume deleted it.
TEST(CheckpointPaths, MissingDirpathIsRefusedAndTheCheckpointSurvives) {
  const auto r = run(R"([{"latest_path": "$CKPT/a-0-4", "best_k_models": {}}, null])");
  expect_error(r, {"latest_path", "dirpath\" is missing"});
  EXPECT_TRUE(fs::exists(sandbox().ckpt() / "a-0-4.json"));
  EXPECT_TRUE(fs::exists(sandbox().ckpt() / "a-0-4.safetensors"));
}

TEST(CheckpointPaths, DotDotOutOfTheDirectoryIsRefused) {
  const auto r = run(R"([{"dirpath": "$CKPT", "latest_path": "$CKPT/../../outside/notes"}, null])");
  expect_error(r, {"latest_path", "outside the recorded checkpoint directory"});
  // The same spelled relative to the working directory.
  const auto rel = run(R"([{"dirpath": "ckpts", "best_k_models": {"ckpts/../../outside/vck": null}}, null])");
  expect_error(rel, {"best_k_models", "ckpts/../../outside/vck", "outside the recorded checkpoint directory"});
  // dirpath itself is not a path inside it.
  expect_error(run(R"([{"dirpath": "$CKPT", "latest_path": "$CKPT/."}, null])"), {"latest_path"});
}

TEST(CheckpointPaths, AbsolutePathElsewhereIsRefused) {
  const auto r = run(R"([null, {"dirpath": "$CKPT", "best_model_score": 0.5,
                                "best_k_models": {"$CKPT/b-0-4": 0.5, "$OUT/vck": 1e9}}])");
  expect_error(r, {"best_k_models", (sandbox().outside() / "vck").string()});
  EXPECT_TRUE(fs::exists(sandbox().outside() / "vck.json"));
}

TEST(CheckpointPaths, LinkOutOfTheDirectoryIsRefusedAtFitStart) {
  const auto r = run(R"([{"dirpath": "$CKPT", "latest_path": "$CKPT/out_link/vck"}, null])");
  expect_error(r, {"latest_path", "following links", "outside the checkpoint directory"});
  const auto rel = run(R"([null, {"dirpath": "$CKPT", "best_k_models": {"$CKPT/rel_link/vck": 1e9}}])");
  expect_error(rel, {"best_k_models entry", "rel_link/vck", "following links"});
  EXPECT_TRUE(fs::exists(sandbox().outside() / "vck.json"));
  EXPECT_TRUE(fs::exists(sandbox().outside() / "vck.safetensors"));
}

// A consistent record of another directory (a moved run, a new version folder): its top-k set is dropped, the
// run goes on, and nothing there is touched.
TEST(CheckpointPaths, RecordOfAnotherDirectoryIsNotActedOn) {
  const auto r = run(R"([{"dirpath": "$OUT", "latest_path": "$OUT/vck", "best_k_models": {"$OUT/vck": null}},
                         {"dirpath": "$OUT", "best_k_models": {"$OUT/vck": 1e9, "$OUT/notes": 1e8}}])");
  EXPECT_EQ(r.error, "");
  const auto n = names_in(sandbox().ckpt());
  EXPECT_TRUE(n.count("a-2-12.json"));
  EXPECT_FALSE(n.count("a-1-8.json"));  // the run's own rotation still works
  EXPECT_TRUE(n.count("b-1-8.json") && n.count("b-2-12.json"));
}

// The run's own checkpoints rotate as before; a file in the directory that is not a Volt checkpoint is never
// deleted, even when the record lists it.
TEST(CheckpointPaths, OnlyProvenVoltCheckpointsAreDeleted) {
  const auto own = run(R"([{"dirpath": "$CKPT", "latest_path": "$CKPT/a-0-4", "best_k_models": {"$CKPT/a-0-4": null}},
                           {"dirpath": "$CKPT", "best_k_models": {"$CKPT/b-0-4": 1e9}}])");
  EXPECT_EQ(own.error, "");
  auto n = names_in(sandbox().ckpt());
  EXPECT_FALSE(n.count("a-0-4.json") || n.count("a-0-4.safetensors") || n.count("a-1-8.json"));
  EXPECT_TRUE(n.count("a-2-12.json") && n.count("a-2-12.safetensors"));
  EXPECT_FALSE(n.count("b-0-4.json"));  // the worst (1e9) went at the second save
  EXPECT_TRUE(n.count("b-1-8.json") && n.count("b-2-12.json"));

  const auto mine = run(R"([null, {"dirpath": "$CKPT", "best_k_models": {"$CKPT/mine": 1e9, "$CKPT/b-0-4": 1e8}}])");
  EXPECT_EQ(mine.error, "");
  n = names_in(sandbox().ckpt());
  EXPECT_TRUE(n.count("mine.json") && n.count("mine.safetensors"));  // a user's file: kept
  EXPECT_FALSE(n.count("b-0-4.json"));                              // a Volt checkpoint of this run: rotated
}

TEST(CheckpointPaths, MalformedStateIsAnErrorNamingTheKey) {
  expect_error(run(R"([{"dirpath": 7}, null])"), {"dirpath", "expected a path string"});
  expect_error(run(R"([{"dirpath": "$CKPT", "best_k_models": ["x"]}, null])"), {"best_k_models", "expected an object"});
  expect_error(run(R"([{"dirpath": "$CKPT", "best_k_models": {"$CKPT/a-0-4": "good"}}, null])"),
               {"best_k_models[", "expected a score"});
  expect_error(run(R"([[1], null])"), {"expected an object"});
}

// ckpt_path="best" in a fresh Trainer reads best_model_path from the newest record: the same rules apply.
TEST(CheckpointPaths, BestPathFromARecordMustLieInItsDirectory) {
  namespace d = fuzz::paths_case_detail;
  ScratchDir dir("ckpaths_best");
  const fs::path ck = dir.path / "ckpts";
  auto fit = [&](int64_t epochs, const std::string& ckpt_path) {
    d::LineModule m;
    Trainer t(d::options(dir.path, epochs, d::checkpoint_a(ck), d::checkpoint_b(ck)));
    t.fit(m, d::loader(), nullptr, ckpt_path);
  };
  fit(1, "");
  fs::copy(ck, dir.path / "saved");
  fit(2, "best");  // the record's own best_model_path: accepted
  fs::remove_all(ck);
  fs::copy(dir.path / "saved", ck);
  const std::string key = d::checkpoint_b(ck)->state_key();
  for (const char* stem : {"a-0-4", "b-0-4"}) {
    json j = nn::load_json((ck / stem).string() + ".json");
    j["callbacks"][key]["best_model_path"] = (dir.path / "saved" / "b-0-4").string();
    nn::save_json_atomic((ck / stem).string() + ".json", j);
  }
  VOLT_EXPECT_ERROR(fit(2, "best"), "ckpt_path=\"best\"", "best_model_path", "saved/b-0-4", "lies outside");
}

TEST(CheckpointPaths, SeedCorpusHoldsTheOracle) {
  const fs::path dir = fs::path(VOLT_FUZZ_CORPUS_DIR) / "fuzz_checkpoint_paths";
  int cases = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    SCOPED_TRACE(e.path().filename().string());
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    run(ss.str());
    ++cases;
  }
  EXPECT_GE(cases, 10);
}

TEST(CheckpointPathHelpers, WithinAndSameDirectory) {
  EXPECT_TRUE(path_lexically_within("/r/c/a", "/r/c"));
  EXPECT_TRUE(path_lexically_within("/r/c/x/../a", "/r/c/"));
  EXPECT_TRUE(path_lexically_within("c/a", "./c"));
  EXPECT_FALSE(path_lexically_within("/r/c", "/r/c"));
  EXPECT_FALSE(path_lexically_within("/r/c/.", "/r/c"));
  EXPECT_FALSE(path_lexically_within("/r/c/../d/a", "/r/c"));
  EXPECT_FALSE(path_lexically_within("/r/cd/a", "/r/c"));
  EXPECT_FALSE(path_lexically_within("/r/c/a", "r/c"));
  EXPECT_FALSE(path_lexically_within("", "/r/c"));
  EXPECT_FALSE(path_lexically_within("/r/c/a", ""));
  ScratchDir d("ckpaths_helpers");
  fs::create_directories(d.path / "c");
  fs::create_directories(d.path / "o");
  fs::create_symlink(d.path / "o", d.path / "c" / "l");
  fs::create_symlink(d.path / "c", d.path / "c2");
  const std::string c = (d.path / "c").string();
  EXPECT_TRUE(path_resolves_within(c + "/a", c));
  EXPECT_TRUE(path_resolves_within(c + "/l", c));  // the link itself lies in c
  EXPECT_FALSE(path_resolves_within(c + "/l/a", c));
  EXPECT_TRUE(path_resolves_within((d.path / "c2" / "a").string(), c));
  EXPECT_TRUE(same_directory(c, (d.path / "c2").string()));
  EXPECT_TRUE(same_directory(c + "/", (d.path / "o" / ".." / "c").string()));
  EXPECT_FALSE(same_directory(c, (d.path / "o").string()));
  EXPECT_FALSE(same_directory("", c));
}

// ---- optimizer hyper-state from a record ---------------------------------------------------------------------

namespace {

std::string write_plain_checkpoint(const fs::path& dir, const std::string& optimizer = "sgd") {
  TinyModule m;
  m.optimizer = optimizer;
  auto o = quiet(dir.string());
  o.max_epochs = 1;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir.string(), .filename = "ck"})};
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  return (dir / "ck").string();
}

void resume_plain(const std::string& stem, const std::string& dir, const std::string& optimizer = "sgd") {
  TinyModule m;
  m.optimizer = optimizer;
  auto o = quiet(dir);
  o.max_epochs = 2;
  Trainer t(o);
  t.fit(m, make_loader(8, 2), nullptr, stem);
}

void set_hyper(const std::string& stem, const std::string& key, double v) {
  json j = nn::load_json(stem + ".json");
  j["optimizers"][0]["hyper"][key] = v;
  nn::save_json_atomic(stem + ".json", j);
}

}  // namespace

TEST(CheckpointHyperState, NegativeLearningRateIsRefusedNamingTheKey) {
  ScratchDir dir("ckpaths_lr");
  const std::string stem = write_plain_checkpoint(dir.path);
  set_hyper(stem, "group.0.lr", -1.0);
  VOLT_EXPECT_ERROR(resume_plain(stem, dir.str()), "ck.json", "optimizers[0].hyper", "'group.0.lr' = -1",
                    "expected a value >= 0");
}

TEST(CheckpointHyperState, OutOfRangeOptionsAreRefused) {
  ScratchDir dir("ckpaths_adam");
  const std::string stem = write_plain_checkpoint(dir.path, "adam");
  const json saved = nn::load_json(stem + ".json");
  auto restore = [&] { nn::save_json_atomic(stem + ".json", saved); };
  set_hyper(stem, "group.0.beta1", 1.5);
  VOLT_EXPECT_ERROR(resume_plain(stem, dir.str(), "adam"), "'group.0.beta1' = 1.5", "[0, 1)");
  restore();
  set_hyper(stem, "group.0.eps", -1e-8);
  VOLT_EXPECT_ERROR(resume_plain(stem, dir.str(), "adam"), "'group.0.eps'", ">= 0");
  restore();
  set_hyper(stem, "group.0.amsgrad", 0.5);
  VOLT_EXPECT_ERROR(resume_plain(stem, dir.str(), "adam"), "'group.0.amsgrad' = 0.5", "0 or 1");
  restore();
  set_hyper(stem, "group.0.lr", 0.02);  // in range: accepted
  resume_plain(stem, dir.str(), "adam");
}

TEST(CheckpointHyperState, LoadHyperStateIsAllOrNothing) {
  Tensor p = zeros({2});
  p.set_requires_grad(true);
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  VOLT_EXPECT_ERROR(sgd.load_hyper_state({{"group.0.lr", 0.5}, {"group.0.momentum", -0.1}}), "'group.0.momentum'");
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.1);  // nothing applied
  VOLT_EXPECT_ERROR(sgd.load_hyper_state({{"group.0.nesterov", 1.0}, {"group.0.momentum", 0.0}}),
                    "'group.0.nesterov' = 1 needs momentum > 0");
  EXPECT_FALSE(sgd.param_groups()[0].options.nesterov.value());
  sgd.load_hyper_state({{"group.0.lr", 0.5}, {"group.0.nesterov", 1.0}});
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.5);
  EXPECT_TRUE(sgd.param_groups()[0].options.nesterov.value());
}

// ---- leftovers next to the resumed checkpoint ------------------------------------------------------------------

TEST(CheckpointFiles, ResumeCleansTheFolderItResumesFrom) {
  ScratchDir dir("ckpaths_orphans");
  const fs::path old_dir = dir.path / "version_0" / "checkpoints", new_dir = dir.path / "version_1" / "checkpoints";
  fs::create_directories(old_dir);
  const std::string stem = write_plain_checkpoint(old_dir);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path tmp = old_dir / (".epoch=1-step=8.safetensors.tmp." + std::to_string(dead) + ".0");
  std::ofstream(tmp) << "partial";
  const fs::path orphan = old_dir / "epoch=1-step=8.safetensors";
  nn::save_safetensors(orphan.string(), {{"w", zeros({3})}}, {{"format", "volt-checkpoint"}});
  const fs::path foreign = old_dir / "weights.safetensors", fresh = old_dir / "epoch=2-step=12.safetensors";
  nn::save_safetensors(foreign.string(), {{"w", zeros({3})}});
  nn::save_safetensors(fresh.string(), {{"w", zeros({3})}}, {{"format", "volt-checkpoint"}});
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& p : {tmp, orphan, foreign}) fs::last_write_time(p, old);
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = new_dir.string()})};
  Trainer t(o);
  t.fit(m, make_loader(8, 2), nullptr, stem);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(foreign));  // not written by a Trainer
  EXPECT_TRUE(fs::exists(fresh));    // too recent: a writer may still be at work
  EXPECT_TRUE(fs::exists(stem + ".json") && fs::exists(stem + ".safetensors"));
  EXPECT_TRUE(fs::exists(new_dir / "epoch=1-step=8.json"));
}
