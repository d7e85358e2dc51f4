#pragma once
// Shared pieces of the multi-rank Trainer tests (run under mpirun with 1, 2 and 3 ranks).
#include "trainer/trainer.h"

namespace volt::test {

// Quiet DDP on CPU ranks; the world size comes from the launcher (devices > 1 would re-exec under mpirun).
inline TrainerOptions ddp_options() {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = "1";
  o.strategy = "ddp";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  return o;
}

}  // namespace volt::test
