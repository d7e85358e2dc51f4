// The profilers under DDP (mpirun -np 2 / 3, and alone): every rank profiles its own work and writes its reports,
// named by rank, into rank 0's directory; collectives appear in the hook table with their time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/ddp_test_util.h"
#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

using namespace volt;
namespace fs = std::filesystem;

TEST(DDPProfiler, EveryRankWritesItsOwnReportsIntoRankZerosDirectory) {
  dist::ProcessGroup& pg = dist::default_group();
  const std::string dir = test::shared_dir("profiler");
  TrainerOptions o = test::ddp_options();
  o.max_epochs = 1;
  o.default_root_dir = dir;
  o.profiler = "advanced";
  Trainer t(o);
  test::LineModule m;
  auto train = std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(rand_with_seed({24, 2}, 5, 0), rand_with_seed({24}, 6, 0)),
      data::DataLoaderOptions{.batch_size = 2});
  t.fit(m, train);
  const std::string out = t.profiler_output_dir();
  ASSERT_FALSE(out.empty());
  // Every rank agrees on the directory (rank 0's log dir) and wrote its own files there.
  const std::string tag = pg.world_size() > 1 ? "-rank" + std::to_string(pg.rank()) : "";
  for (const char* suffix : {"-simple.txt", "-ops.csv", "-trace.json"})
    EXPECT_TRUE(fs::exists(out + "/fit" + tag + suffix)) << out << "/fit" << tag << suffix;
  // Each rank's steps and its collectives (the sync_dist reduction of the logged loss) are in its table.
  const auto rows = t.profiler()->action_stats();
  const int64_t steps = t.global_step();
  bool step_row = false, comm_row = false;
  for (const auto& r : rows) {
    if (r.name == "[TrainModule]training_step") {
      step_row = true;
      EXPECT_EQ(r.calls, steps);
    }
    if (r.layer == "comm" && r.calls > 0) comm_row = true;
  }
  EXPECT_TRUE(step_row);
  if (pg.world_size() > 1) EXPECT_TRUE(comm_row);
  std::ifstream f(out + "/fit" + tag + "-trace.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const auto trace = nlohmann::json::parse(ss.str());
  EXPECT_EQ(trace.at("traceEvents").at(0).at("args").at("name"), "volt rank " + std::to_string(pg.rank()));
}
