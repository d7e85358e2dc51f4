#pragma once
// Shared pieces of the multi-rank Trainer tests (run under mpirun with 1, 2 and 3 ranks).
#include <unistd.h>

#include <filesystem>
#include <string>

#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/optim.h>
#include <volt/trainer/trainer.h>

namespace volt::test {

// Quiet DDP on CPU ranks; the world size comes from the launcher (devices="auto": world_size / num_nodes per
// node; an explicit count must equal it, and without a launcher a count > 1 would re-exec under mpirun).
inline TrainerOptions ddp_options() {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = "auto";  // the launcher's processes, all on this machine (num_nodes = 1)
  o.strategy = "ddp";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  return o;
}

// w (2) fitted by SGD to y = sum(x * w), its loss logged with sync_dist (one collective per step).
struct LineModule : TrainModule {
  Tensor w = register_parameter("w", zeros({2}));
  std::string type_name() const override { return "LineModule"; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = mse_loss((b.input * w).sum({1}), b.target);
    log("loss", loss, {.sync_dist = true});
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.1}); }
};

// A directory every rank agrees on (rank 0's pid), emptied and created by rank 0. (collective)
inline std::string shared_dir(const std::string& name) {
  dist::ProcessGroup& pg = dist::default_group();
  Tensor pid = from_vector<int64_t>({static_cast<int64_t>(::getpid())});
  pg.broadcast(pid, 0);
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("volt_ddp_test_" + name + "_" + std::to_string(pid.item<int64_t>()));
  if (pg.rank() == 0) {
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
  }
  pg.barrier();
  return p.string();
}

}  // namespace volt::test
