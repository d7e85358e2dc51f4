// Loggers under DDP (mpirun -np 2 / 3, and alone as one rank): loggers built on every rank are used on rank 0
// only, and the files they write are rank 0's alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "common/ddp_test_util.h"
#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/trainer/loggers/tensorboard_logger.h>
#include <volt/trainer/trainer.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

struct CountingLogger : Logger {
  std::vector<std::string> calls;
  std::string name() const override { return "counting"; }
  int version() const override { return 0; }
  std::string log_dir() const override { return "/nonexistent"; }
  void log_metrics(const MetricMap&, int64_t step) override { calls.push_back("metrics@" + std::to_string(step)); }
  void log_hyperparams(const nlohmann::json&) override { calls.push_back("hparams"); }
  void finalize(RunStatus s) override { calls.push_back(std::string("finalize:") + to_string(s)); }
};


}  // namespace

TEST(DDPLoggers, OnlyRankZeroLogs) {
  dist::ProcessGroup& pg = dist::default_group();
  const std::string dir = test::shared_dir("loggers");
  auto counting = std::make_shared<CountingLogger>();
  TrainerOptions o = test::ddp_options();
  o.logger = true;
  o.loggers = {std::make_shared<CSVLogger>(dir), std::make_shared<TensorBoardLogger>(dir), counting};
  o.log_every_n_steps = 1;
  o.max_epochs = 1;
  o.default_root_dir = dir;
  Trainer t(o);
  test::LineModule m;
  auto train = std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(rand_with_seed({12, 2}, 5, 0), rand_with_seed({12}, 6, 0)),
      data::DataLoaderOptions{.batch_size = 2});
  t.fit(m, train);
  const int64_t steps = t.global_step();
  ASSERT_GT(steps, 0);
  if (pg.rank() == 0) {
    EXPECT_EQ(t.loggers().size(), 3u);
    ASSERT_EQ(counting->calls.size(), static_cast<size_t>(steps + 2));  // hparams, a row per step, finalize
    EXPECT_EQ(counting->calls.front(), "hparams");
    EXPECT_EQ(counting->calls.back(), "finalize:success");
  } else {
    EXPECT_TRUE(t.loggers().empty());
    EXPECT_EQ(t.logger(), nullptr);
    EXPECT_TRUE(counting->calls.empty()) << "rank " << pg.rank() << " logged";
  }
  pg.barrier();
  // One version directory, written by rank 0: metrics.csv (a row per step), hparams.yaml and one event file.
  std::vector<std::string> entries;
  for (auto& e : fs::recursive_directory_iterator(fs::path(dir) / "lightning_logs")) {
    std::string rel = fs::relative(e.path(), dir).string();
    if (rel.find("events.out.tfevents.") != std::string::npos) rel = "lightning_logs/version_0/<events>";
    entries.push_back(rel);
  }
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"lightning_logs/version_0", "lightning_logs/version_0/<events>",
                                               "lightning_logs/version_0/hparams.yaml",
                                               "lightning_logs/version_0/metrics.csv"}));
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}
