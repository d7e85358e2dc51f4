// The Logger interface through the Trainer: a user subclass sees log_hyperparams / log_metrics / save /
// finalize with the expected steps and statuses, several loggers receive the same rows, logger=false writes
// nothing, CSVLogger's rows reach the disk during an epoch, the examples' --logger flag, and
// scripts/plot_metrics.py on a run's metrics.csv.
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>

#include "examples/example_common.h"
#include <volt/trainer/loggers/tensorboard_logger.h>
#include "trainer/tfevents_reader.h"
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {

// Records every call the Trainer makes.
struct RecordingLogger : Logger {
  std::string dir;
  std::vector<std::string> calls;  // "hparams", "metrics@<step>", "save", "finalize:<status>"
  std::vector<std::pair<int64_t, MetricMap>> rows;
  nlohmann::json hparams;
  explicit RecordingLogger(std::string d) : dir(std::move(d)) {}
  std::string name() const override { return "recording"; }
  int version() const override { return 7; }
  std::string log_dir() const override { return dir; }
  void log_metrics(const MetricMap& m, int64_t step) override {
    calls.push_back("metrics@" + std::to_string(step));
    rows.emplace_back(step, m);
  }
  void log_hyperparams(const nlohmann::json& h) override {
    calls.push_back("hparams");
    hparams = h;
  }
  void save() override { calls.push_back("save"); }
  void finalize(RunStatus s) override { calls.push_back(std::string("finalize:") + to_string(s)); }
};

// Logs "a" = batch index on step and "m" = the sum of 1..n on epoch; validation logs "vx" (max of 0.5 * index)
// on epoch and "vs" = index on step.
void log_everything(TinyModule& m) {
  m.save_hyperparameters({{"lr", 0.1}, {"layers", 2}});
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("a", static_cast<double>(i));
    mm.log("m", static_cast<double>(i + 1), {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
  };
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("vx", 0.5 * static_cast<double>(i), {.reduce_fx = "max"});
    mm.log("vs", static_cast<double>(i), {.on_step = true, .on_epoch = false});
  };
}

std::vector<std::string> all_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(Loggers, CustomLoggerReceivesHparamsRowsSavesAndFinalize) {
  ScratchDir dir("custom_logger");
  auto rec = std::make_shared<RecordingLogger>((dir.path / "custom").string());
  TinyModule m;
  log_everything(m);
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.log_every_n_steps = 2;
  o.loggers = {rec};
  Trainer t(o);
  t.fit(m, make_loader(12, 4));  // 3 steps per epoch: step rows at global_step 2, 4, 6 (logged steps 1, 3, 5)
  EXPECT_EQ(t.logger(), rec.get());
  ASSERT_EQ(t.loggers().size(), 1u);
  EXPECT_EQ(t.log_dir(), rec->dir);
  EXPECT_EQ(rec->hparams, (nlohmann::json{{"lr", 0.1}, {"layers", 2}, {"precision", "32-true"}}));
  EXPECT_EQ(rec->calls, (std::vector<std::string>{"hparams", "metrics@1", "metrics@2", "save", "metrics@3",
                                                  "metrics@5", "metrics@5", "save", "finalize:success"}));
  using Rows = std::vector<std::pair<int64_t, MetricMap>>;
  EXPECT_EQ(rec->rows, (Rows{{1, {{"a", 1}, {"epoch", 0}}},
                             {2, {{"m", 6}, {"epoch", 0}}},
                             {3, {{"a", 0}, {"epoch", 1}}},
                             {5, {{"a", 2}, {"epoch", 1}}},
                             {5, {{"m", 6}, {"epoch", 1}}}}));

  // test() after fit: one more row, at the number of steps taken (6, as upstream), and another finalize;
  // hparams are not sent again.
  rec->calls.clear();
  rec->rows.clear();
  t.test(m, make_loader(8, 4));
  EXPECT_EQ(rec->calls, (std::vector<std::string>{"metrics@6", "finalize:success"}));
  ASSERT_EQ(rec->rows.size(), 1u);
  EXPECT_EQ(rec->rows[0].second.count("test_loss"), 1u);
  EXPECT_EQ(rec->rows[0].second.at("epoch"), 2.0);
  EXPECT_FALSE(fs::exists(rec->dir)) << "the Trainer writes nothing into a custom logger's directory itself";
}

TEST(Loggers, FailedAndInterruptedRunsFinalizeWithTheirStatus) {
  ScratchDir dir("logger_status");
  {
    auto rec = std::make_shared<RecordingLogger>(dir.str());
    auto csv = std::make_shared<CSVLogger>(dir.str());  // flushes every 100 steps: only finalize writes here
    TinyModule m;
    m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
      mm.log("a", static_cast<double>(i));
      if (i == 2) VOLT_FAIL("boom at batch 2");
    };
    auto o = quiet(dir.str());
    o.loggers = {csv, rec};
    Trainer t(o);
    VOLT_EXPECT_ERROR(t.fit(m, make_loader(20, 2)), "boom at batch 2");
    EXPECT_EQ(rec->calls.back(), "finalize:failed");
    // The rows logged before the exception reached metrics.csv.
    EXPECT_EQ(read_csv(csv->log_dir() + "/metrics.csv").rows.size(), 2u);
  }
  {
    auto rec = std::make_shared<RecordingLogger>(dir.str());
    TinyModule m;
    m.on_val_step = [](TinyModule&, const Batch&, int64_t, const Tensor&) { VOLT_FAIL("validation broke"); };
    auto o = quiet(dir.str());
    o.loggers = {rec};
    Trainer t(o);
    VOLT_EXPECT_ERROR(t.validate(m, make_loader(8, 4)), "validation broke");
    EXPECT_EQ(rec->calls, (std::vector<std::string>{"hparams", "finalize:failed"}));
  }
  {
    auto rec = std::make_shared<RecordingLogger>(dir.str());
    TinyModule m;
    m.on_train_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor&) {
      if (mm.train_steps == 2) std::raise(SIGINT);
    };
    auto o = quiet(dir.str());
    o.max_epochs = 3;
    o.loggers = {rec};
    Trainer t(o);
    t.fit(m, make_loader(20, 2));
    EXPECT_TRUE(t.interrupted());
    EXPECT_EQ(rec->calls.back(), "finalize:interrupted");
  }
}

TEST(Loggers, CsvAndTensorBoardReceiveTheSameRows) {
  ScratchDir dir("two_loggers");
  auto csv = std::make_shared<CSVLogger>(dir.str());
  auto tb = std::make_shared<TensorBoardLogger>(dir.str());
  auto rec = std::make_shared<RecordingLogger>(dir.str());
  TinyModule m;
  log_everything(m);
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.loggers = {csv, tb, rec};
  Trainer t(o);
  t.fit(m, make_loader(10, 4), make_loader(6, 4));
  EXPECT_EQ(t.logger(), csv.get());
  EXPECT_EQ(t.loggers().size(), 3u);
  // Both file loggers share one version directory (the Trainer settled the versions before either wrote).
  const fs::path version_dir = dir.path / "lightning_logs" / "version_0";
  EXPECT_EQ(csv->log_dir(), version_dir.string());
  EXPECT_EQ(tb->log_dir(), version_dir.string());
  EXPECT_EQ(t.log_dir(), version_dir.string());
  EXPECT_EQ(all_files(dir.path / "lightning_logs").size(), 4u)
      << "version_0 with metrics.csv, hparams.yaml and one event file";

  // The reference: what the Trainer sent (3 step rows, 2 validation step rows, 2 epoch rows per epoch).
  const auto& want = rec->rows;
  ASSERT_EQ(want.size(), 14u);
  const Csv c = read_csv(csv->log_dir() + "/metrics.csv");
  ASSERT_EQ(c.rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("csv row " + std::to_string(i));
    EXPECT_EQ(std::stoll(c.rows[i].at("step")), want[i].first);
    EXPECT_EQ(c.rows[i].size(), want[i].second.size() + 1);  // + "step"
    for (const auto& [k, v] : want[i].second) EXPECT_DOUBLE_EQ(std::stod(c.rows[i].at(k)), v) << k;
  }
  std::vector<TfEvent> events;
  for (auto& e : fs::directory_iterator(version_dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = read_events(e.path().string());
  ASSERT_EQ(events.size(), want.size() + 2);  // after the file version and the hparams events
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i + 2));
    const TfEvent& e = events[i + 2];
    EXPECT_EQ(e.step, want[i].first);
    std::map<std::string, float> got;
    for (const auto& v : e.values) got[v.tag] = v.simple_value;
    std::map<std::string, float> expected;
    for (const auto& [k, v] : want[i].second) expected[k] = static_cast<float>(v);
    EXPECT_EQ(got, expected);
  }

  // The next run's loggers move on to version_1 together.
  auto csv2 = std::make_shared<CSVLogger>(dir.str());
  auto tb2 = std::make_shared<TensorBoardLogger>(dir.str());
  o.loggers = {tb2, csv2};
  Trainer t2(o);
  TinyModule m2;
  t2.fit(m2, make_loader(4, 4));
  EXPECT_EQ(csv2->version(), 1);
  EXPECT_EQ(tb2->version(), 1);
  EXPECT_EQ(t2.log_dir(), (dir.path / "lightning_logs" / "version_1").string());
}

TEST(Loggers, LoggerFalseWritesNothing) {
  ScratchDir dir("no_logger");
  TinyModule m;
  log_everything(m);
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.logger = false;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(8, 4));
  t.validate(m, make_loader(8, 4));
  t.test(m, make_loader(8, 4));
  t.predict(m, make_loader(8, 4));
  EXPECT_TRUE(t.loggers().empty());
  EXPECT_EQ(t.logger(), nullptr);
  EXPECT_EQ(t.log_dir(), dir.str());
  EXPECT_EQ(all_files(dir.path), std::vector<std::string>{});

  // logger=false with loggers is a contradiction, refused before training; so is a null logger.
  auto rec = std::make_shared<RecordingLogger>(dir.str());
  o.loggers = {rec};
  TinyModule m2;
  Trainer t2(o);
  VOLT_EXPECT_ERROR(t2.fit(m2, make_loader(8, 4)), "logger=false", "1 logger(s)");
  EXPECT_TRUE(rec->calls.empty());
  EXPECT_EQ(m2.train_steps, 0);
  o.logger = true;
  o.loggers = {rec, nullptr};
  Trainer t3(o);
  VOLT_EXPECT_ERROR(t3.fit(m2, make_loader(8, 4)), "loggers[1] is null");
  EXPECT_EQ(m2.train_steps, 0);
}

TEST(Loggers, WithoutALoggerCkptPathLastFindsTheCheckpoints) {
  ScratchDir dir("no_logger_last");
  auto o = quiet(dir.str());
  o.logger = false;
  o.enable_checkpointing = true;  // writes <root>/checkpoints, there being no logger directory
  o.max_epochs = 1;
  TinyModule first;
  Trainer t(o);
  t.fit(first, make_loader(8, 4));
  ASSERT_TRUE(fs::exists(dir.path / "checkpoints" / "epoch=0-step=2.json"));
  o.max_epochs = 2;
  TinyModule resumed;
  Trainer t2(o);
  t2.fit(resumed, make_loader(8, 4), nullptr, "last");
  EXPECT_EQ(resumed.train_steps, 2) << "only the second epoch ran";
  EXPECT_EQ(t2.global_step(), 4);
}

namespace {
// After each training batch: how many rows metrics.csv holds on disk.
struct DiskRows : Callback {
  std::vector<size_t> seen;
  void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const Batch&, int64_t) override {
    const std::string path = t.log_dir() + "/metrics.csv";
    seen.push_back(fs::exists(path) ? read_csv(path).rows.size() : 0);
  }
};
}  // namespace

TEST(Loggers, CsvRowsReachTheDiskDuringTheEpoch) {
  ScratchDir dir("csv_flush");
  auto disk = std::make_shared<DiskRows>();
  auto csv = std::make_shared<CSVLogger>(dir.str(), CSVLoggerOptions{.flush_logs_every_n_steps = 3});
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) { mm.log("a", static_cast<double>(i)); };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.loggers = {csv};
  o.callbacks = {disk};
  Trainer t(o);
  t.fit(m, make_loader(20, 2));  // one epoch of 10 steps, a row per step
  // Written at steps 2, 5 and 8 (3 steps after the last write), then at the epoch end.
  EXPECT_EQ(disk->seen, (std::vector<size_t>{0, 0, 3, 3, 3, 6, 6, 6, 9, 9}));
  const Csv c = read_csv(csv->log_dir() + "/metrics.csv");
  ASSERT_EQ(c.rows.size(), 10u);
  EXPECT_EQ(c.rows[9].at("a"), "9");
  // The first write replaced the file atomically, later ones appended: no temporary file is left beside it.
  EXPECT_EQ(all_files(csv->log_dir()), (std::vector<std::string>{"hparams.yaml", "metrics.csv"}));
  VOLT_EXPECT_ERROR(CSVLogger(dir.str(), {.flush_logs_every_n_steps = 0}), "CSVLogger", "flush_logs_every_n_steps=0");
  CSVLogger unwritable("/dev/null/runs");
  VOLT_EXPECT_ERROR(unwritable.save(), "CSVLogger", "/dev/null/runs/lightning_logs/version_0", "cannot create");
}

TEST(CSVLogger, AppendsRowsAndRewritesTheFileWhenAColumnAppears) {
  ScratchDir dir("csv_append");
  CSVLogger csv(dir.str(), {.flush_logs_every_n_steps = 1});
  auto text = [](const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  auto inode = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_ino;
  };
  csv.log_metrics({{"a", 1}}, 0);
  const std::string path = csv.log_dir() + "/metrics.csv";
  ASSERT_EQ(text(path), "a,step\n1,0\n");
  const auto first = inode(path);
  csv.log_metrics({{"a", 2}}, 1);  // same columns: appended to the same file
  EXPECT_EQ(text(path), "a,step\n1,0\n2,1\n");
  EXPECT_EQ(inode(path), first);
  csv.log_metrics({{"a", 3}, {"b", 4}}, 2);  // a new column: every row rewritten under the new header
  EXPECT_EQ(text(path), "a,b,step\n1,,0\n2,,1\n3,4,2\n");
  EXPECT_NE(inode(path), first) << "a header change must replace the file atomically";
  {
    std::ofstream clobber(path);  // someone else's file now: never appended to
    clobber << "x\n";
  }
  csv.log_metrics({{"a", 5}, {"b", 6}}, 3);
  EXPECT_EQ(text(path), "a,b,step\n1,,0\n2,,1\n3,4,2\n5,6,3\n");
}

TEST(CSVLogger, DefaultLoggerWritesWheneverStepRowsAreDue) {
  ScratchDir dir("csv_default_flush");
  auto disk = std::make_shared<DiskRows>();
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) { mm.log("a", static_cast<double>(i)); };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.log_every_n_steps = 4;  // no loggers given: the Trainer's CSVLogger flushes with every step row
  o.callbacks = {disk};
  Trainer t(o);
  t.fit(m, make_loader(20, 2));
  EXPECT_EQ(disk->seen, (std::vector<size_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2}));
}

TEST(Loggers, ExampleLoggerFlag) {
  auto loggers_for = [](const std::string& flag, bool& logger) {
    examples::Args a;
    a.out = "/tmp/volt_example_logger_flag";
    a.logger = flag;
    TrainerOptions o;
    examples::apply_logger_flag(a, o);
    logger = o.logger;
    std::vector<std::string> kinds;
    for (auto& l : o.loggers) {
      if (dynamic_cast<CSVLogger*>(l.get())) kinds.push_back("csv");
      else if (dynamic_cast<TensorBoardLogger*>(l.get())) kinds.push_back("tensorboard");
      EXPECT_EQ(l->log_dir().rfind("/tmp/volt_example_logger_flag/lightning_logs/version_", 0), 0u);
    }
    return kinds;
  };
  bool on = false;
  EXPECT_EQ(loggers_for("csv", on), std::vector<std::string>{"csv"});
  EXPECT_TRUE(on);
  EXPECT_EQ(loggers_for("tensorboard", on), std::vector<std::string>{"tensorboard"});
  EXPECT_TRUE(on);
  EXPECT_EQ(loggers_for("both", on), (std::vector<std::string>{"csv", "tensorboard"}));
  EXPECT_TRUE(on);
  EXPECT_EQ(loggers_for("none", on), std::vector<std::string>{});
  EXPECT_FALSE(on);
  EXPECT_FALSE(fs::exists("/tmp/volt_example_logger_flag")) << "building the loggers writes nothing";
}

TEST(PlotMetrics, WritesPngCurvesFromARunsMetricsCsv) {
  std::string python;
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  if (python.empty()) GTEST_SKIP() << "no python3 with matplotlib (apt-get install python3-matplotlib)";
  ScratchDir dir("plot_metrics");
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) {
    mm.log("train_loss", loss, {.on_step = true, .on_epoch = true});
  };
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) { mm.log("val_loss", loss); };
  auto o = quiet(dir.str());
  o.max_epochs = 3;
  Trainer t(o);
  t.fit(m, make_loader(16, 4), make_loader(8, 4));
  const std::string csv = t.log_dir() + "/metrics.csv";
  const std::string png = (dir.path / "curves.png").string();
  const std::string out = (dir.path / "stdout.txt").string();
  const std::string cmd = python + " " VOLT_PLOT_METRICS_SCRIPT " " + csv + " --out " + png + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream so(out);
  const std::string printed((std::istreambuf_iterator<char>(so)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << cmd << "\n" << printed;
  // One subplot for the loss: the training step and epoch curves with the validation curve.
  EXPECT_NE(printed.find("loss: train_loss_epoch, train_loss_step, val_loss"), std::string::npos) << printed;
  std::ifstream f(png, std::ios::binary);
  std::string head(8, '\0');
  ASSERT_TRUE(f.read(head.data(), 8)) << png << " missing or short";
  EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(fs::file_size(png), 1000u);
  // A run killed inside an append leaves a last line without its newline: the script leaves it out.
  {
    std::ofstream torn(csv, std::ios::app);
    torn << "0.1x";
  }
  const int rc_torn = std::system((python + " " VOLT_PLOT_METRICS_SCRIPT " " + csv + " --out " + png + " > " + out + " 2>&1").c_str());
  std::ifstream so2(out);
  const std::string printed2((std::istreambuf_iterator<char>(so2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc_torn, 0) << printed2;
  // Given a version directory, the script finds metrics.csv and writes metrics.png beside it.
  ASSERT_EQ(std::system((python + " " VOLT_PLOT_METRICS_SCRIPT " " + t.log_dir() + " > /dev/null 2>&1").c_str()), 0);
  EXPECT_TRUE(fs::exists(t.log_dir() + "/metrics.png"));
}
