// A DDP training job (Trainer, CPU ranks, a small regression) that is killed from outside by
// check_rank_kill.sh: one rank gets SIGKILL mid-training; the others must exit non-zero within the collective
// timeout naming the missing rank, and the job must then resume from its last checkpoint at any world size.
//
//   rank_kill_driver <dir> <max_epochs> [<checkpoint stem to resume from>]
// Writes <dir>/pid.<rank> at start, checkpoints to <dir>/ckpt (last + every epoch), prints one line per epoch
// and "rank R: done epoch=E step=S w0=..." at the end; a volt::Error is printed as "rank R: error: ..." (exit 3).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include <volt/data/data.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

struct Regressor : TrainModule {
  Tensor w, b;  // (4), (1)
  Regressor() {
    w = register_parameter("w", zeros({4}, DType::f64));
    b = register_parameter("b", zeros({1}, DType::f64));
  }
  std::string type_name() const override { return "Regressor"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    return mse_loss((batch.input * w).sum({1}) + b, batch.target);
  }
  // Paces the job (about 10 ms a step) so that the kill lands mid-epoch.
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.05, .momentum = 0.9}); }
};

std::shared_ptr<data::DataLoader> loader() {
  const int64_t n = 240;
  std::vector<double> xs(n * 4), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) xs[i * 4 + j] = std::sin(0.37 * i + 1.1 * j);
    ys[i] = xs[i * 4] - 2 * xs[i * 4 + 1] + 0.5 * xs[i * 4 + 3] + 0.25;
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {n, 4}), from_vector(ys, {n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 3});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <dir> <max_epochs> [resume-checkpoint]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = env_rank ? std::atoi(env_rank) : 0;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/pid." + std::to_string(rank)) << ::getpid() << "\n";
  try {
    seed_everything(11);
    Regressor m;
    auto ckpt = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.dirpath = dir + "/ckpt", .save_top_k = -1, .save_last = true});
    Trainer trainer({.accelerator = "cpu", .devices = "auto", .strategy = "ddp", .max_epochs = std::atoll(argv[2]),
                     .num_sanity_val_steps = 0, .enable_progress_bar = false, .enable_model_summary = false,
                     .default_root_dir = dir, .logger = false, .callbacks = {ckpt}});
    trainer.fit(m, loader(), nullptr, argc > 3 ? argv[3] : "");
    std::printf("rank %d: done world=%d epoch=%lld step=%lld w0=%.9f\n", trainer.strategy().global_rank(),
                trainer.strategy().world_size(), static_cast<long long>(trainer.current_epoch()),
                static_cast<long long>(trainer.global_step()), m.w.to_vector<double>()[0]);
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", rank, e.what());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}
