// A small training job for the preemption tests (tests/reliability/test_preemption.cpp,
// check_preemption_mpi.sh): an MLP with dropout, Adam with an epoch and a step scheduler, a shuffled loader, a
// CSVLogger and the default ModelCheckpoint, plus a Preemption callback. Steps are paced (--step-ms) so that a
// signal sent from outside lands mid-epoch.
//
// Usage: preempt_driver <root> <epochs> [--resume auto|<stem>] [--ddp] [--requeue] [--requeue-timeout S]
//                       [--requeue-command CMD] [--step-ms N] [--signal N] [--signal-before-fit] [--async]
//   Writes <root>/pid.<rank> at start and <root>/progress.<rank> once 3 optimizer steps are done. --resume auto
//   resumes from Preemption::resume_path (nothing: a fresh start). --signal-before-fit raises the warning signal
//   on itself before fit (a warning during set-up). --async adds AsyncCheckpointing and a checkpoint after every
//   optimizer step (written in the background). Exit codes: 0 done (rank 0 wrote <root>/final.safetensors),
//   42 preempted (one line "preempted checkpoint=... step=... requeued=0|1" on stdout), 128+signal interrupted,
//   3 error.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/async_checkpointing.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/callbacks/preemption.h>
#include <volt/trainer/trainer.h>

#include "driver_job.h"

using namespace volt;

namespace {

int g_step_ms = 0;
std::string g_root;

// The shared job, paced so that a signal sent from outside lands mid-epoch, and reporting its progress.
struct Mlp : reliability::DriverMlp {
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    if (g_step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_step_ms));
    if (trainer()->global_step() == 3)
      std::ofstream(g_root + "/progress." + std::to_string(trainer()->strategy().global_rank())) << "3\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: preempt_driver <root> <epochs> [--resume auto|<stem>] [--ddp] [--requeue] "
                 "[--requeue-timeout S] [--requeue-command CMD] [--step-ms N] [--signal N] [--signal-before-fit] "
                 "[--async]\n";
    return 2;
  }
  g_root = argv[1];
  const int64_t epochs = std::atoll(argv[2]);
  std::string resume;
  bool ddp = false, signal_before_fit = false, async = false;
  PreemptionOptions popt;
  for (int i = 3; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "preempt_driver: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--resume") resume = value();
    else if (flag == "--ddp") ddp = true;
    else if (flag == "--requeue") popt.auto_requeue = true;
    else if (flag == "--requeue-timeout") popt.requeue_timeout_s = std::atof(value().c_str());
    else if (flag == "--requeue-command") popt.requeue_command = value();
    else if (flag == "--step-ms") g_step_ms = std::atoi(value().c_str());
    else if (flag == "--signal") popt.signal = std::atoi(value().c_str());
    else if (flag == "--signal-before-fit") signal_before_fit = true;
    else if (flag == "--async") async = true;
    else {
      std::cerr << "preempt_driver: unknown flag " << flag << "\n";
      return 2;
    }
  }
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = env_rank ? std::atoi(env_rank) : 0;
  std::filesystem::create_directories(g_root);
  std::ofstream(g_root + "/pid." + std::to_string(rank)) << ::getpid() << "\n";
  try {
    auto preemption = std::make_shared<Preemption>(popt);
    Mlp model;
    TrainerOptions o{.accelerator = "cpu", .devices = "1", .max_epochs = epochs, .enable_progress_bar = false,
                     .enable_model_summary = false, .default_root_dir = g_root, .callbacks = {preemption},
                     .log_every_n_steps = 1, .seed = 20240611};
    if (async) {
      o.callbacks.push_back(std::make_shared<AsyncCheckpointing>());
      o.callbacks.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.every_n_train_steps = 1}));
    }
    if (ddp) {
      o.devices = "auto";
      o.strategy = "ddp";
    }
    Trainer trainer(o);
    if (resume == "auto") resume = preemption->resume_path(trainer);
    if (signal_before_fit) std::raise(popt.signal);
    trainer.fit(model, reliability::make_driver_loader(192), nullptr, resume);
    if (preemption->preempted()) {
      if (trainer.strategy().is_global_zero())
        std::cout << "preempted checkpoint=" << preemption->checkpoint_path() << " step=" << trainer.global_step()
                  << " requeued=" << preemption->requeued() << std::endl;
      return 42;
    }
    if (trainer.interrupted()) return 128 + trainer.interrupt_signal();
    if (trainer.strategy().is_global_zero()) nn::save_safetensors(g_root + "/final.safetensors", model.state_dict());
  } catch (const Error& e) {
    std::cerr << "preempt_driver: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
