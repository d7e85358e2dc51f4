// num_nodes under mpirun (2 and 3 ranks on one machine, and alone as one rank): every rank asserts.
//  - a fit whose num_nodes x devices matches the world size: the layout (node_rank, local_rank) on every rank,
//    the batch arithmetic over the world (shards, estimated_stepping_batches, effective_batch_size), and the
//    launcher's local rank reported where ranks are not placed node by node (all "nodes" here are one host);
//  - a mismatch: every rank throws the same volt::Error naming the numbers, and the ranks stay in step
//    (a collective right after completes: nobody hangs).
#include <gtest/gtest.h>

#include <string>

#include "common/ddp_test_util.h"
#include "common/gradcheck.h"
#include <volt/data/data.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }
int rank() { return pg().rank(); }
int world() { return pg().world_size(); }

// 24 samples y = sum(x * (1, -2)): 24 = 2 * 3 * 4 divides evenly for 1, 2 and 3 ranks at batch 2.
std::shared_ptr<data::DataLoader> line_loader(int64_t batch) {
  std::vector<float> xs(48), ys(24);
  for (int i = 0; i < 24; ++i) {
    xs[2 * i] = static_cast<float>(i % 5) * 0.25f;
    xs[2 * i + 1] = static_cast<float>(i % 3) * 0.5f - 0.5f;
    ys[i] = xs[2 * i] - 2 * xs[2 * i + 1];
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {24, 2}), from_vector(ys, {24}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = batch});
}

// LineModule recording what the Trainer says from configure_optimizers on.
struct RecordingModule : test::LineModule {
  int64_t estimated = -1;
  Optimizers configure_optimizers() override {
    estimated = trainer()->estimated_stepping_batches();
    return LineModule::configure_optimizers();
  }
};

// Rank r's value on every rank, in rank order.
std::vector<int64_t> gathered(int64_t v) {
  return pg().all_gather(from_vector<int64_t>({v})).reshape({-1}).to_vector<int64_t>();
}

void fit_with_layout(int num_nodes, const std::string& devices, int want_per_node) {
  TrainerOptions o = test::ddp_options();
  o.num_nodes = num_nodes;
  o.devices = devices;
  o.max_epochs = 2;
  o.accumulate_grad_batches = 2;
  ::testing::internal::CaptureStderr();
  Trainer trainer(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(trainer.strategy().name(), "ddp");
  EXPECT_EQ(trainer.world_size(), world());
  EXPECT_EQ(trainer.num_nodes(), num_nodes);
  EXPECT_EQ(trainer.node_rank(), rank() / want_per_node);
  EXPECT_EQ(trainer.global_rank(), rank());
  auto& ddp = dynamic_cast<DDPStrategy&>(trainer.strategy());
  EXPECT_EQ(ddp.layout().devices_per_node, want_per_node);
  EXPECT_EQ(ddp.layout().local_rank, rank() % want_per_node);
  // Every process runs on this one host, so the launcher's local rank is the global rank: where the options
  // say otherwise, the rank says so.
  EXPECT_EQ(trainer.local_rank(), pg().local_rank());
  const bool disagrees = pg().local_rank() != rank() % want_per_node;
  EXPECT_EQ(ddp.layout_warning().empty(), !disagrees) << ddp.layout_warning();
  EXPECT_EQ(err.find("launcher reports local rank") != std::string::npos, disagrees) << err;
  if (disagrees)
    EXPECT_NE(err.find("--map-by ppr:" + std::to_string(want_per_node) + ":node"), std::string::npos) << err;
  // Node ranks over the job: want_per_node consecutive ranks per node.
  const std::vector<int64_t> nodes = gathered(trainer.node_rank());
  for (int r = 0; r < world(); ++r) EXPECT_EQ(nodes[r], r / want_per_node) << "rank " << r;

  // Batch arithmetic over the world: each rank's shard of 24 samples at batch 2, two batches per step.
  EXPECT_EQ(trainer.effective_batch_size(2), 2 * 2 * world());
  RecordingModule m;
  trainer.fit(m, line_loader(2));
  const int64_t batches = 24 / (2 * world());
  EXPECT_EQ(trainer.num_training_batches(), batches);
  EXPECT_EQ(m.estimated, 2 * ((batches + 1) / 2));
  EXPECT_EQ(trainer.global_step(), m.estimated);
  // The replicas stayed identical (gradients were averaged over every rank).
  const std::vector<float> w = m.w.detach().to_vector<float>();
  Tensor all = pg().all_gather(from_vector(w, {2}));
  for (int r = 0; r < world(); ++r)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(all.to_vector<float>()[r * 2 + j], w[j]) << "rank " << r;
  EXPECT_NE(w[0], 0.0f);
}

}  // namespace

TEST(DDPNumNodes, EveryRankItsOwnNode) { fit_with_layout(world(), "1", 1); }

TEST(DDPNumNodes, OneNodeWithEveryDevice) { fit_with_layout(1, std::to_string(world()), world()); }

TEST(DDPNumNodes, AutoDevicesSplitTheWorldOverTheNodes) { fit_with_layout(world(), "auto", 1); }

TEST(DDPNumNodes, MismatchFailsOnEveryRankWithTheNumbers) {
  // 3 ranks: num_nodes=2 x devices=1 = 2; 2 ranks (and 1): num_nodes=2 x devices=2 = 4.
  const int devices = world() == 3 ? 1 : 2;
  TrainerOptions o = test::ddp_options();
  o.num_nodes = 2;
  o.devices = std::to_string(devices);
  std::string message;
  try {
    Trainer trainer(o);
  } catch (const Error& e) {
    message = e.what();
  }
  if (dist::detect_launch_env().source == "none") {
    // Alone, without mpirun: a multi-node job needs a launcher.
    EXPECT_NE(message.find("num_nodes=2 needs a launcher"), std::string::npos) << message;
  } else {
    for (const std::string& w :
         {"num_nodes=2 x devices=" + std::to_string(devices) + " = " + std::to_string(2 * devices) + " processes",
          "the launcher started " + std::to_string(world()), "mpirun -np " + std::to_string(2 * devices),
          "num_nodes x devices = " + std::to_string(world())})
      EXPECT_NE(message.find(w), std::string::npos) << "'" << message << "' lacks '" << w << "'";
  }
  // Every rank failed the same way, and they are still in step.
  const std::vector<int64_t> failed = gathered(message.empty() ? 0 : 1);
  for (int r = 0; r < world(); ++r) EXPECT_EQ(failed[r], 1) << "rank " << r << " did not fail";

  // devices="auto" with a world that does not split over the nodes (3 ranks over 2 nodes).
  if (world() == 3) {
    o.devices = "auto";
    VOLT_EXPECT_ERROR(Trainer{o}, "started 3 processes", "do not split evenly over num_nodes=2");
  }
  pg().barrier();
}
