// SIGINT under DDP: the signal reaches ONE rank (as when a user interrupts one process of a job); every rank
// must stop after the same optimizer step, report the same signal and leave identical replicas, with no rank
// waiting in a collective the others left.
#include <gtest/gtest.h>

#include <csignal>
#include <unistd.h>

#include <filesystem>

#include <volt/data/data.h>
#include "common/ddp_test_util.h"
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

struct SignalledRegressor : TrainModule {
  Tensor w, b;  // (3), (1)
  int signal_rank = 0;
  int64_t signal_at = 3;  // batch index at which that rank raises SIGINT
  SignalledRegressor() {
    w = register_parameter("w", zeros({3}, DType::f64));
    b = register_parameter("b", zeros({1}, DType::f64));
  }
  Tensor training_step(const Batch& batch, int64_t idx) override {
    if (idx == signal_at && dist::default_group().rank() == signal_rank) std::raise(SIGINT);
    return mse_loss((batch.input * w).sum({1}) + b, batch.target);
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.1}); }
};

std::shared_ptr<data::DataLoader> loader(int64_t n) {
  std::vector<double> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) xs[i * 3 + j] = std::cos(0.6 * i + 1.3 * j);
    ys[i] = 2 * xs[i * 3] - xs[i * 3 + 2] + 0.1;
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {n, 3}), from_vector(ys, {n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2});
}

}  // namespace

TEST(DdpInterrupt, OneRanksSigintStopsEveryRankAtTheSameStep) {
  auto& pg = dist::default_group();
  namespace fs = std::filesystem;
  // One directory per job (rank 0's pid): CTest runs the 1-, 2- and 3-rank jobs side by side.
  Tensor pid = from_vector(std::vector<int64_t>{static_cast<int64_t>(::getpid())}, {1});
  pg.broadcast(pid, 0);
  std::string dir = (fs::temp_directory_path() / ("volt_ddp_interrupt_" + std::to_string(pid.item<int64_t>()))).string();
  if (pg.rank() == 0) fs::remove_all(dir);
  pg.barrier();
  SignalledRegressor m;
  m.signal_rank = pg.world_size() - 1;
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir});
  TrainerOptions o = test::ddp_options();
  o.enable_checkpointing = true;
  o.max_epochs = 3;
  o.default_root_dir = dir;
  o.callbacks = {ckpt};
  Trainer t(o);
  t.fit(m, loader(20 * pg.world_size()));  // 10 batches per rank and epoch
  EXPECT_TRUE(t.interrupted());
  EXPECT_EQ(t.interrupt_signal(), SIGINT);
  EXPECT_EQ(t.current_epoch(), 0);
  Tensor state = from_vector(std::vector<double>{static_cast<double>(t.global_step())}, {1});
  Tensor steps = pg.all_gather(state);
  for (int r = 0; r < pg.world_size(); ++r) EXPECT_EQ(steps.select(0, r).item(), steps.select(0, 0).item()) << r;
  // The step that raised the signal completes (batches 0..3); with several ranks the stop is agreed at the
  // next multiple of 8 optimizer steps.
  EXPECT_EQ(t.global_step(), pg.world_size() == 1 ? 4 : 8);
  Tensor p = cat({m.w.detach(), m.b.detach()}, 0);
  Tensor all = pg.all_gather(p);
  for (int r = 1; r < pg.world_size(); ++r)
    EXPECT_EQ(all.select(0, r).contiguous().to_vector<double>(), all.select(0, 0).contiguous().to_vector<double>());
  // Rank 0 wrote the interrupted checkpoint; every rank sees it after the agreed save.
  EXPECT_TRUE(fs::exists(dir + "/interrupted.json"));
  EXPECT_TRUE(fs::exists(dir + "/interrupted.safetensors"));
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}
