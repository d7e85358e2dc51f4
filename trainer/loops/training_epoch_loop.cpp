// One training epoch: its start (resume position, hooks, progress bar), the batches (one fetched ahead, with
// validation inside the epoch, interrupts and stops), and the epoch end (schedulers, validation, epoch metrics).
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

void Trainer::train_epoch(data::DataLoader& train, data::DataLoader* val) {
  const int64_t start = start_train_epoch(train, val);
  const EpochProgress progress = run_training_batches(train, val, start);
  train.reset();
  pbar_->finish(last_pbar_);
  if (!progress.interrupted) end_train_epoch(val, progress);
}

int64_t Trainer::start_train_epoch(data::DataLoader& train, data::DataLoader* val) {
  TrainModule& m = *module_;
  stage_ = Stage::train;
  m.train();
  num_train_batches_ = opt_.limit_train_batches.resolve(train.size(), "limit_train_batches");
  // An interval longer than the epoch would silently never validate (and never feed EarlyStopping or a
  // monitoring ModelCheckpoint): refuse it, as the upstream trainer does.
  VOLT_CHECK(val == nullptr || !val_has_step_ || opt_.val_check_interval.is_fraction ||
                 opt_.val_check_interval.count <= num_train_batches_,
             "Trainer: val_check_interval=", opt_.val_check_interval.count, " batches is longer than the epoch (",
             num_train_batches_, " training batches); use a value <= ", num_train_batches_,
             " or a fraction such as 1.0");
  int64_t start = resume_skip_;
  resume_skip_ = 0;
  if (start > 0) train.load_state({epoch_, start});
  else train.set_epoch(epoch_);
  results_train_.reset();
  batches_done_ = start;
  for_each_callback(callbacks_, "on_train_epoch_start", [&](Callback& c) { c.on_train_epoch_start(*this, m); });
  {
    LogScope s(m, &results_train_, "on_train_epoch_start");
    m.on_train_epoch_start();
  }
  pbar_->start("Epoch", num_train_batches_, epoch_);
  return start;
}

Trainer::EpochProgress Trainer::run_training_batches(data::DataLoader& train, data::DataLoader* val, int64_t start) {
  EpochProgress out;
  // One batch in flight: batch idx + 1 is taken from the loader and its upload queued before step idx runs, so
  // loading and copying overlap the step instead of following it. A batch fetched for a step that never runs
  // (a stop, an interrupt) is dropped with the pass by train.reset() below; the resume position in checkpoints
  // is batches_done_ (batches trained), never the loader's own count, so it does not shift a resumed run.
  std::optional<Batch> next = start < num_train_batches_ ? fetch_batch(train) : std::nullopt;
  for (int64_t idx = start; idx < num_train_batches_; ++idx) {
    if (!next) break;
    Batch batch = std::move(*next);
    next.reset();
    batch.wait_for_upload();  // before batch idx + 1's upload is queued, which this step then does not wait for
    is_last_batch_ = idx + 1 == num_train_batches_;
    batch_idx_ = idx;
    if (!is_last_batch_) next = fetch_batch(train);  // never beyond limit_train_batches
    begin_training_batch(idx, start);
    {
      trace::Range range(trace::Layer::trainer, "run_training_batch");
      training_batch(batch, idx);
    }
    if (window_open_ && global_step_ >= window_end_) close_profile_window();
    batches_done_ = idx + 1;
    update_progress_bar(idx);
    out.validated_last = false;
    if (val && due_val_check(idx) && !is_last_batch_) {
      trace::Range range(trace::Layer::trainer, "run_validation");
      run_validation(*val, false);
      out.validated_last = true;
    }
    // An interrupt on the epoch's last batch waits for the epoch end (run_fit polls again there), so the
    // checkpoint never holds a finished epoch without its epoch-end work; inside a gradient-accumulation
    // window it waits for the stepping batch, since checkpoints do not hold accumulated gradients.
    if (!is_last_batch_ && (idx + 1) % opt_.accumulate_grad_batches == 0 && poll_interrupt()) {
      out.interrupted = true;  // no epoch-end work: the epoch is unfinished, and resumes after this batch
      return out;
    }
    bool hard_stop = (opt_.max_steps >= 0 && global_step_ >= opt_.max_steps) || nonfinite_stop_ || time_exceeded();
    // A stop requested on one rank mid-epoch is only acted on once agreed (after a validation run or at
    // epoch end), so no rank leaves the loop alone; with one process it takes effect after this batch.
    bool stop_now = strategy_->world_size() == 1 ? should_stop_ : stop_agreed_;
    if (hard_stop || (stop_now && stop_allowed())) {
      if (hard_stop) should_stop_ = true;
      out.completed = is_last_batch_;
      break;
    }
  }
  return out;
}

void Trainer::begin_training_batch(int64_t idx, int64_t start) {
  // The window covers optimizer steps A..B-1; a run resumed at or past B never opens it.
  if (window_begin_ >= 0 && !window_open_ && !window_done_ && global_step_ >= window_begin_ &&
      global_step_ < window_end_)
    open_profile_window();
  if (idx == start || idx % opt_.accumulate_grad_batches == 0) {
    // A gradient-accumulation window starts here: where a checkpoint taken inside it resumes (see
    // save_checkpoint), with the random state the window's batches start from.
    window_start_batch_ = idx;
    window_rng_ = {default_generator().seed(), default_generator().offset()};
  }
}

void Trainer::update_progress_bar(int64_t idx) {
  if (pbar_->enabled()) {
    MetricMap pm;
    if (pbar_->wants_refresh(idx)) {
      pm = last_pbar_;
      for (auto& [k, v] : results_train_.step_pbar_metrics()) pm[k] = v;
    }
    pbar_->update(idx, pm);
  }
}

void Trainer::end_train_epoch(data::DataLoader* val, const EpochProgress& progress) {
  TrainModule& m = *module_;
  // "epoch" schedulers step before the epoch-end validation, so that a checkpoint written there already holds
  // the scheduler state of the next epoch (a resumed run then continues bit-identically).
  if (m.automatic_optimization) step_schedulers(SchedulerInterval::epoch);  // manual optimisation steps its own schedulers
  if (val && !progress.validated_last && batches_done_ > 0 && due_val_check(batches_done_ - 1) &&
      (progress.completed || batches_done_ == num_train_batches_)) {
    trace::Range range(trace::Layer::trainer, "run_validation");
    run_validation(*val, false);
  }
  stage_ = Stage::train;
  for_each_callback(
    callbacks_, "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(*this, m); }, CallbackSet::non_monitoring);
  {
    LogScope s(m, &results_train_, "on_train_epoch_end");
    m.on_train_epoch_end();
  }
  results_train_.compute_epoch(*strategy_);
  update_callback_metrics(results_train_.epoch_callback_metrics());
  for (auto& [k, v] : results_train_.epoch_pbar_metrics()) last_pbar_[k] = v;
  log_epoch_metrics(results_train_);
  for_each_callback(
    callbacks_, "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(*this, m); }, CallbackSet::monitoring);
  // A stop request must hold on every rank before anyone leaves the loop.
  should_stop_ = stop_agreed_ = strategy_->reduce_decision(should_stop_, /*all=*/false);
  ++epoch_;
  batches_done_ = 0;
  save_loggers();
}

}  // namespace volt
