// Trainer: construction (options checked, strategy and callbacks set up through the connectors), attaching a
// module to a run and detaching it, and the state accessors. The loops live in loops/, the rest in connectors/.
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
#include <volt/trainer/strategies/node_layout.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/model_summary.h>

namespace volt {

namespace {
int64_t g_seed = -1;
}

void seed_everything(uint64_t seed) {
  g_seed = static_cast<int64_t>(seed);
  manual_seed(seed);
}
int64_t global_seed() { return g_seed; }

Trainer::Trainer(TrainerOptions options) : opt_(std::move(options)) {
  try {
    if (!opt_.log_level.empty()) logging::set_level(logging::parse_level(opt_.log_level));
    precision_ = parse_precision(opt_.precision);
  } catch (const Error& e) {
    VOLT_FAIL("Trainer: ", e.what());
  }
  opt_.validate();
  overfit_ = opt_.overfit_batches.is_fraction ? opt_.overfit_batches.fraction > 0 : opt_.overfit_batches.count > 0;
  apply_batch_limits();
  max_epochs_ = opt_.max_epochs;
  if (max_epochs_ == -1 && opt_.max_steps == -1) max_epochs_ = 1000;  // upstream default
  max_time_s_ = parse_max_time(opt_.max_time);
  if (opt_.seed >= 0) seed_everything(static_cast<uint64_t>(opt_.seed));
  if (opt_.deterministic) set_allow_tf32(false);
  {
    const ProfilerKind kind = parse_profiler(opt_.profiler);
    if (kind != ProfilerKind::none) profiler_ = std::make_unique<Profiler>(kind);
    std::tie(window_begin_, window_end_) = parse_profile_steps(opt_.profile_steps);
  }

  setup_strategy();
  check_precision_supported(precision_, strategy_->root_device());
  if (precision_ == Precision::f16_mixed) scaler_ = std::make_unique<GradScaler>(opt_.grad_scaler);

  setup_callbacks();
  pbar_ = std::make_unique<ProgressBar>();
  pbar_->set_enabled(opt_.enable_progress_bar && strategy_->is_global_zero());
}

void Trainer::apply_batch_limits() {
  if (opt_.fast_dev_run > 0) {
    // A smoke test of every loop: n batches each, one epoch, no sanity check, nothing logged or saved.
    const int64_t n = opt_.fast_dev_run;
    opt_.max_steps = n;
    opt_.max_epochs = 1;
    opt_.limit_train_batches = opt_.limit_val_batches = opt_.limit_test_batches = opt_.limit_predict_batches =
        BatchAmount(n);
    opt_.val_check_interval = BatchAmount(1.0);
    opt_.check_val_every_n_epoch = 1;
    opt_.num_sanity_val_steps = 0;
    opt_.logger = false;
    opt_.loggers.clear();
    opt_.enable_checkpointing = false;
    overfit_ = false;
  } else if (overfit_) {
    opt_.limit_train_batches = opt_.overfit_batches;
    opt_.limit_val_batches = opt_.overfit_batches;
  }
}

Trainer::~Trainer() = default;

void Trainer::apply_benchmark_option() {
  if (opt_.benchmark.has_value()) {
    if (*opt_.benchmark && opt_.deterministic && strategy_->is_global_zero())
      std::cerr << "Trainer: warning: deterministic=true with benchmark=true: cuDNN convolution algorithms are "
                   "chosen by timing, which can pick different algorithms (and round differently) from run to run; "
                   "leave benchmark unset or false for repeatable runs\n";
    set_cudnn_benchmark(*opt_.benchmark);
  } else if (opt_.deterministic) {
    set_cudnn_benchmark(false);  // upstream: benchmark defaults to false under deterministic
  }
}

int64_t Trainer::effective_batch_size(int64_t batch_size) const {
  return volt::effective_batch_size(batch_size, opt_.accumulate_grad_batches, strategy_->world_size());
}

std::string Trainer::log_dir() const {
  if (!loggers_.empty()) return loggers_.front()->log_dir();
  return opt_.default_root_dir;
}

void Trainer::attach(TrainModule& module) {
  module_ = &module;
  module.trainer_ = this;
  // "-true" modes store the parameters in the half (or double) dtype; done before the strategy places the
  // module so that DDP's buckets and the optimizers' state are made for the final dtype.
  if (precision_param_dtype(precision_) != DType::f32) module.to(precision_param_dtype(precision_));
  strategy_->setup(module);
  strategy_->bind(module);
  module.device_ = strategy_->root_device();
  if (opt_.sync_batchnorm && strategy_->world_size() > 1) {
    Strategy* strategy = strategy_.get();
    for (auto& [name, child] : module.named_modules())
      if (auto* bn = dynamic_cast<nn::BatchNormBase*>(child)) {
        bn->set_sync([strategy](Tensor& t) { strategy->all_reduce_sum(t); });
        synced_bns_.push_back(bn);
      }
  }
  setup_loggers(module);
  pbar_->set_version(loggers_.empty() ? -1 : loggers_.front()->version());
  if (profiler_) {
    // Every rank writes its reports into rank 0's directory (the loggers, and so log_dir(), live on rank 0),
    // agreed here, where every rank is known to arrive, not at teardown, where a rank may have failed.
    const std::string dir = opt_.profiler_dir.empty() ? log_dir() + "/profiler" : opt_.profiler_dir;
    profile_dir_ = strategy_->broadcast_string(dir);
  }
}

void Trainer::release_sync_batchnorm() noexcept {
  // The layers outlive this stage (and maybe this Trainer): they must not keep calling its strategy.
  for (auto* bn : synced_bns_) bn->set_sync(nullptr);
  synced_bns_.clear();
}

void Trainer::detach(RunStatus status) {
  {
    trace::Range range(trace::Layer::trainer, "[Trainer]teardown");
    finalize_loggers(status);
    release_sync_batchnorm();
    if (module_) strategy_->teardown(*module_);
  }
  profile_finish();
  stage_ = Stage::none;
}

void Trainer::update_callback_metrics(const MetricMap& m) {
  for (auto& [k, v] : m) callback_metrics_[k] = v;
}

MetricMap Trainer::callback_metrics() const {
  MetricMap out = callback_metrics_;
  if (stage_ == Stage::train)
    for (auto& [k, v] : results_train_.step_callback_metrics()) out[k] = v;
  return out;
}

}  // namespace volt
