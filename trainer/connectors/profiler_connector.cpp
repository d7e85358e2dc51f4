// The Trainer's side of the profiler: opening and closing the profile_steps window, and the report at the end
// of a stage (none for a failed stage).
#include <volt/trainer/trainer.h>

#include <volt/runtime/trace.h>
#include <volt/trainer/connectors/callback_calls.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <volt/kernels/cudnn_benchmark.h>
#include <volt/kernels/ops.h>
#include <volt/nn/layers/batchnorm.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/generator.h>
#include <volt/runtime/log.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/model_summary.h>

namespace volt {

void Trainer::profile_start(const char* stage) {
  window_open_ = window_done_ = false;
  if (profiler_) profiler_->start(stage, /*op_window=*/window_begin_ < 0 || std::string(stage) != "fit");
}

void Trainer::open_profile_window() {
  window_open_ = true;
  trace::cuda_profiler_start(strategy_->root_device());
  if (profiler_) profiler_->set_op_window(true);
}

void Trainer::close_profile_window() noexcept {
  window_open_ = false;
  window_done_ = true;
  if (profiler_) profiler_->set_op_window(false);
  trace::cuda_profiler_stop(strategy_->root_device());
}

void Trainer::profile_abandon() noexcept {
  if (window_open_) close_profile_window();
  if (profiler_) profiler_->abandon();  // no report for a failed stage, and no waiting on the GPU
}

void Trainer::profile_finish() {
  if (window_open_) close_profile_window();
  if (!profiler_ || !profiler_->running()) return;
  profiler_->stop();
  if (profile_dir_.empty()) return;  // the stage failed before attach()
  // No collective here: each rank writes its own files. A report that cannot be written costs a warning, not
  // the run.
  const int world = strategy_->world_size(), rank = strategy_->global_rank();
  try {
    profiler_->write(profile_dir_, world > 1 ? "rank" + std::to_string(rank) : "", rank);
  } catch (const std::exception& e) {
    logging::warn(std::string("the profiler reports were not written: ") + e.what());
    return;
  }
  if (!strategy_->is_global_zero()) return;
  if (profiler_->kind() != ProfilerKind::ops) std::cout << profiler_->simple_table();
  if (profiler_->kind() != ProfilerKind::simple) std::cout << profiler_->ops_table();
  std::cout << "Profiler reports in " << profile_dir_ << "\n" << std::flush;
}

}  // namespace volt
