// A small, deterministic training run for the crash tests (tests/reliability/): an MLP with dropout on
// synthetic regression data, Adam with an epoch and a step LR scheduler, a shuffled loader, and a
// ModelCheckpoint that saves every optimizer step (plus "last"). Every piece of state that resume must
// restore is present, and the run takes a fraction of a second.
//
// Usage: kill_resume_driver <root> <epochs> [--resume last|<stem>] [--slow-write-us N]
//   Writes checkpoints and logs under <root>/lightning_logs/version_*/ and, when fit completes, the final
//   weights to <root>/final.safetensors. Exit codes: 0 done, 128+signal interrupted (SIGINT/SIGTERM), 3 error.
//   --slow-write-us sleeps N microseconds after each chunk of every atomic write, so that a SIGKILL at a
//   random instant often lands inside a checkpoint write.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/atomic_file.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

#include "driver_job.h"

using namespace volt;

namespace {

useconds_t g_slow_us = 0;
void slow_write(const std::string&) { ::usleep(g_slow_us); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kill_resume_driver <root> <epochs> [--resume last|<stem>] [--slow-write-us N]\n";
    return 2;
  }
  const std::string root = argv[1];
  const int64_t epochs = std::atoll(argv[2]);
  std::string resume;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--resume") resume = argv[i + 1];
    else if (flag == "--slow-write-us") g_slow_us = static_cast<useconds_t>(std::atoll(argv[i + 1]));
    else {
      std::cerr << "kill_resume_driver: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (g_slow_us > 0) set_atomic_write_hook(&slow_write);
  try {
    reliability::DriverMlp model;
    Trainer trainer({.accelerator = "cpu", .devices = "1", .max_epochs = epochs, .enable_progress_bar = false,
                     .enable_model_summary = false, .default_root_dir = root,
                     .callbacks = {std::make_shared<ModelCheckpoint>(
                         ModelCheckpointOptions{.save_last = true, .every_n_train_steps = 1})},
                     .log_every_n_steps = 1, .seed = 20240611});
    trainer.fit(model, reliability::make_driver_loader(96), nullptr, resume);
    if (trainer.interrupted()) return 128 + trainer.interrupt_signal();
    nn::save_safetensors(root + "/final.safetensors", model.state_dict());
  } catch (const Error& e) {
    std::cerr << "kill_resume_driver: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
