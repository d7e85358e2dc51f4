// Two upstream Trainer flags: `num_nodes` (trainer/strategies/node_layout.h: the num_nodes x devices arithmetic, its
// errors, the Trainer's accessors on one process) and `benchmark` (the process-wide cuDNN switch the Trainer
// sets at construction). The multi-rank side of num_nodes is tests/distributed/test_ddp_num_nodes.cpp.
#include <volt/distributed/process_group.h>
#include <volt/kernels/cudnn_benchmark.h>
#include <volt/trainer/strategies/node_layout.h>

#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

TrainerOptions quiet() {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  return o;
}

struct BenchmarkRestore {
  bool saved = cudnn_benchmark();
  ~BenchmarkRestore() { set_cudnn_benchmark(saved); }
};

}  // namespace

TEST(NodeLayout, RanksMapNodeByNode) {
  struct Row {
    int world, rank, nodes, devices;  // devices 0 = "auto"
    int per_node, node_rank, local_rank;
  };
  const std::vector<Row> rows = {
      {1, 0, 1, 1, 1, 0, 0},  {1, 0, 1, 0, 1, 0, 0},  {4, 0, 2, 2, 2, 0, 0}, {4, 1, 2, 2, 2, 0, 1},
      {4, 2, 2, 2, 2, 1, 0},  {4, 3, 2, 2, 2, 1, 1},  {3, 2, 3, 1, 1, 2, 0}, {3, 2, 1, 3, 3, 0, 2},
      {8, 5, 2, 0, 4, 1, 1},  {6, 5, 3, 0, 2, 2, 1},  {16, 13, 4, 4, 4, 3, 1},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(std::to_string(r.world) + " processes, rank " + std::to_string(r.rank) + ", num_nodes " +
                 std::to_string(r.nodes) + ", devices " + std::to_string(r.devices));
    const NodeLayout l = node_layout(r.world, r.rank, r.nodes, r.devices);
    EXPECT_EQ(l.num_nodes, r.nodes);
    EXPECT_EQ(l.devices_per_node, r.per_node);
    EXPECT_EQ(l.node_rank, r.node_rank);
    EXPECT_EQ(l.local_rank, r.local_rank);
    EXPECT_EQ(l.node_rank * l.devices_per_node + l.local_rank, r.rank);
  }
}

TEST(NodeLayout, MismatchesNameTheNumbersAndTheFix) {
  // 3 processes, num_nodes=2, devices=1.
  VOLT_EXPECT_ERROR(node_layout(3, 1, 2, 1), "num_nodes=2 x devices=1 = 2 processes", "the launcher started 3",
                    "mpirun -np 2", "num_nodes x devices = 3", "num_nodes=3, devices=1");
  // The old habit of devices=1 under mpirun -np 2 on one machine.
  VOLT_EXPECT_ERROR(node_layout(2, 0, 1, 1), "num_nodes=1 x devices=1 = 1 process,", "started 2",
                    "num_nodes=1, devices=2", "devices=\"auto\"");
  VOLT_EXPECT_ERROR(node_layout(2, 0, 2, 2), "= 4 processes", "started 2", "mpirun -np 4, 2 per node");
  VOLT_EXPECT_ERROR(node_layout(3, 0, 2, 0), "started 3 processes", "do not split evenly over num_nodes=2",
                    "mpirun -np 4", "divisor of 3");
  VOLT_EXPECT_ERROR(node_layout(2, 0, 0, 1), "num_nodes=0", ">= 1");
  VOLT_EXPECT_ERROR(node_layout(2, 0, 1, -2), "-2 devices per node");
  VOLT_EXPECT_ERROR(node_layout(2, 2, 1, 2), "global rank 2", "world of 2");
}

TEST(NodeLayout, LauncherLocalRankDisagreementIsSpelledOut) {
  const NodeLayout l = node_layout(4, 1, 2, 2);  // node 0, local rank 1
  EXPECT_EQ(local_rank_disagreement(l, 1, 1), "");
  const std::string w = local_rank_disagreement(node_layout(2, 1, 2, 1), 1, 1);  // two "nodes" on one host
  for (const char* word : {"rank 1", "launcher reports local rank 1", "num_nodes=2 x devices=1", "on node 1",
                           "as local rank 0", "follow the launcher's local rank", "--map-by ppr:1:node"})
    EXPECT_NE(w.find(word), std::string::npos) << "'" << w << "' lacks '" << word << "'";
}

TEST(NodeLayout, EffectiveBatchSize) {
  EXPECT_EQ(effective_batch_size(16, 1, 1), 16);
  EXPECT_EQ(effective_batch_size(16, 4, 1), 64);
  EXPECT_EQ(effective_batch_size(32, 2, 6), 384);  // 3 nodes x 2 devices
  VOLT_EXPECT_ERROR(effective_batch_size(16, 0, 2), "accumulate_grad_batches=0");
  VOLT_EXPECT_ERROR(effective_batch_size(16, 1, 0), "world_size=0");
}

TEST(NodeLayout, OneProcessTrainer) {
  TrainerOptions o = quiet();
  o.accumulate_grad_batches = 4;
  Trainer t(o);
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_EQ(t.node_rank(), 0);
  EXPECT_EQ(t.local_rank(), 0);
  EXPECT_EQ(t.global_rank(), 0);
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_EQ(t.effective_batch_size(16), 64);
}

TEST(NodeLayout, TrainerRefusesBadNumNodes) {
  TrainerOptions o = quiet();
  o.num_nodes = 0;
  VOLT_EXPECT_ERROR(Trainer{o}, "num_nodes=0", ">= 1");
  o.num_nodes = -3;
  VOLT_EXPECT_ERROR(Trainer{o}, "num_nodes=-3", ">= 1");
  o.num_nodes = 2;
  o.strategy = "single_device";
  VOLT_EXPECT_ERROR(Trainer{o}, "num_nodes=2", "strategy=\"ddp\"", "single_device");
  if (dist::detect_launch_env().source != "none") GTEST_SKIP() << "started by a launcher";
  // Without a launcher a multi-node job cannot start (its workers would all land on this machine); "auto"
  // picks ddp when num_nodes > 1, as upstream does.
  o.strategy = "ddp";
  o.devices = "2";
  VOLT_EXPECT_ERROR(Trainer{o}, "num_nodes=2 needs a launcher", "mpirun -np 4 -H node1:2,node2:2",
                    "srun -N 2 --ntasks-per-node 2");
  o.strategy = "auto";  // one device per node, but two nodes: DDP
  o.devices = "1";
  VOLT_EXPECT_ERROR(Trainer{o}, "num_nodes=2 needs a launcher", "mpirun -np 2 -H node1:1,node2:1",
                    "srun -N 2 --ntasks-per-node 1");
}

TEST(CudnnBenchmarkOption, TrainerSetsTheSwitchAtConstruction) {
  BenchmarkRestore restore;
  struct Row {
    const char* name;
    bool before;
    std::optional<bool> benchmark;
    bool deterministic;
    bool after;
  };
  const std::vector<Row> rows = {
      {"true", false, true, false, true},
      {"false", true, false, false, false},
      {"unset keeps off", false, std::nullopt, false, false},
      {"unset keeps on", true, std::nullopt, false, true},
      {"unset under deterministic", true, std::nullopt, true, false},
      {"true under deterministic", false, true, true, true},
      {"false under deterministic", true, false, true, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    set_cudnn_benchmark(r.before);
    TrainerOptions o = quiet();
    o.benchmark = r.benchmark;
    o.deterministic = r.deterministic;
    ::testing::internal::CaptureStderr();
    { Trainer t(o); }
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(cudnn_benchmark(), r.after);
    const bool warned = err.find("deterministic=true with benchmark=true") != std::string::npos;
    EXPECT_EQ(warned, r.deterministic && r.benchmark == std::optional<bool>(true)) << err;
  }
}
