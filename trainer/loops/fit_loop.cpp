// The fit loop: fit() entry points, run_fit (reset, checks, restore, sanity check, epochs, end of fit), the
// stop and interrupt conditions, when validation is due, and the schedulers stepped per epoch or step.
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
#include <volt/trainer/callbacks/async_checkpointing.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/model_summary.h>

namespace volt {

void Trainer::setup_fit(TrainModule& module) {
  if (!module.automatic_optimization) {
    VOLT_CHECK(opt_.accumulate_grad_batches == 1, "Trainer: accumulate_grad_batches=", opt_.accumulate_grad_batches,
               " with manual optimisation (", module.type_name(), ".automatic_optimization = false): accumulate in "
               "training_step instead, with toggle_model(sync_grad=false) on the non-stepping batches");
    VOLT_CHECK(opt_.gradient_clip_val == 0, "Trainer: gradient_clip_val with manual optimisation: clip in "
               "training_step (nn::clip_grad_norm_) before ManualOptimizer::step");
  }
  // The logger and checkpoints write under default_root_dir: find out now, not after an epoch of training.
  if (opt_.logger || opt_.enable_checkpointing) ensure_writable_dir(opt_.default_root_dir, "Trainer: default_root_dir");
  manual_sync_grad_ = true;
  attach(module);
  Optimizers o = module.configure_optimizers();
  VOLT_CHECK(!o.optimizers.empty(), module.type_name(), ": configure_optimizers returned no optimizer");
  for (auto& s : o.schedulers) {
    VOLT_CHECK(s.scheduler != nullptr, "configure_optimizers: a SchedulerConfig has no scheduler");
    VOLT_CHECK(s.interval == SchedulerInterval::epoch || s.interval == SchedulerInterval::step,
               "configure_optimizers: scheduler interval=", static_cast<int>(s.interval),
               " is not a SchedulerInterval value");
    VOLT_CHECK(s.frequency >= 1, "configure_optimizers: scheduler frequency=", s.frequency, " must be >= 1");
  }
  optimizers_ = std::move(o.optimizers);
  schedulers_ = std::move(o.schedulers);
  strategy_->setup_optimizers(optimizers_);
}

void Trainer::prepare_datamodule(data::DataModule& dm, const char* stage) {
  // prepare_data (downloads, file writes) once per node; no rank reads before it is done.
  if (strategy_->local_rank() == 0) dm.prepare_data();
  strategy_->barrier("prepare_data");
  dm.setup(stage);
}

void Trainer::fit(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "fit");
  auto train = dm.train_dataloader();
  auto val = dm.val_dataloader();
  fit_dm_ = &dm;
  struct Forget {
    data::DataModule*& dm;
    ~Forget() { dm = nullptr; }
  } forget{fit_dm_};
  fit(module, train, val, ckpt_path);
}

void Trainer::fit(TrainModule& module, std::shared_ptr<data::DataLoader> train, std::shared_ptr<data::DataLoader> val,
                  const std::string& ckpt_path) {
  VOLT_CHECK(train != nullptr, "Trainer::fit: no training loader (train_dataloader returned nullptr)");
  InterruptGuard on_signal;  // SIGINT/SIGTERM stop fit gracefully; the old handlers return with fit
  profile_start("fit");
  FailedRunGuard failed_run{*this};
  // The training loader is prepared (sharded) first, so configure_optimizers can ask for
  // estimated_stepping_batches().
  prepare_loader(*train, true);
  fit_train_ = train;
  struct Forget {
    std::shared_ptr<data::DataLoader>& loader;
    ~Forget() { loader.reset(); }
  } forget{fit_train_};
  {
    trace::Range range(trace::Layer::trainer, "[Trainer]setup");
    setup_fit(module);
  }
  run_fit(std::move(train), std::move(val), ckpt_path);
}

int64_t Trainer::estimated_stepping_batches() const {
  VOLT_CHECK(fit_train_ != nullptr, "Trainer::estimated_stepping_batches: only known during fit (from "
             "configure_optimizers on), where the training loader is");
  const int64_t batches = opt_.limit_train_batches.resolve(fit_train_->size(), "limit_train_batches");
  // The epoch's last batch always steps, so an epoch takes ceil(batches / accumulate_grad_batches) steps.
  const int64_t per_epoch = (batches + opt_.accumulate_grad_batches - 1) / opt_.accumulate_grad_batches;
  if (max_epochs_ < 0) return opt_.max_steps;  // only max_steps limits the run
  const int64_t total = per_epoch * max_epochs_;
  return opt_.max_steps >= 0 ? std::min(total, opt_.max_steps) : total;
}

bool Trainer::poll_interrupt(bool every_step) {
  if (interrupt_signal_ != 0) return true;
  // Agreeing costs a collective when there are several ranks, too much for every small step (a 2-rank MLP at
  // batch 16 lost half its throughput to it): mid-epoch the ranks ask every kInterruptPollSteps optimizer
  // steps, a decision they all take at the same global_step. One process needs no agreement.
  constexpr int64_t kInterruptPollSteps = 8;
  if (!every_step && strategy_->world_size() > 1 && global_step_ % kInterruptPollSteps != 0) return false;
  const int local = InterruptGuard::pending();
  if (!strategy_->reduce_decision(local != 0, /*all=*/false)) return false;
  // Rare path: which signal, agreed (SIGINT wins), so every rank reports the same one.
  interrupt_signal_ = strategy_->reduce_decision(local == SIGINT, /*all=*/false) ? SIGINT : SIGTERM;
  return true;
}

bool Trainer::stop_allowed() const { return epoch_ >= opt_.min_epochs && global_step_ >= opt_.min_steps; }

bool Trainer::time_exceeded() const {
  if (max_time_s_ < 0) return false;
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start_).count();
  // Every rank must agree, or one rank would leave the loop while the others wait in a collective.
  return strategy_->reduce_decision(el >= max_time_s_, /*all=*/false);
}

void Trainer::run_fit(std::shared_ptr<data::DataLoader> train, std::shared_ptr<data::DataLoader> val,
                      const std::string& ckpt_path) {
  DetectAnomalyGuard anomaly(opt_.detect_anomaly || autograd::anomaly_enabled());
  if (val) prepare_loader(*val, false);
  reset_fit_state();
  // limit_val_batches = 0 disables validation (and with it the sanity check) entirely.
  if (val && opt_.limit_val_batches.resolve(val->size(), "limit_val_batches") == 0) val = nullptr;
  has_val_ = val != nullptr;
  callback_metrics_.clear();
  check_training_batches(*train);
  if (!ckpt_path.empty()) {
    trace::Range range(trace::Layer::trainer, "[Trainer]restore_checkpoint");
    resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/true);
  }
  batches_done_ = resume_skip_;  // the position an interrupt before the first batch must record
  start_fit(val.get());
  // After any restore: a captured step holds the optimizer state and parameters it was captured with.
  step_graph_.configure(opt_.cuda_graphs, strategy_->root_device(), step_graph_obstacle());
  run_epochs(train, val);
  finish_fit();
}

void Trainer::reset_fit_state() {
  epoch_ = 0;
  global_step_ = 0;
  batches_done_ = 0;
  resume_skip_ = 0;
  should_stop_ = false;
  stop_agreed_ = false;
  nonfinite_stop_ = false;
  nonfinite_losses_ = 0;
  interrupt_signal_ = 0;
  val_has_step_ = true;
}

void Trainer::check_training_batches(const data::DataLoader& train) {
  // Batches per epoch (train_epoch recomputes it): an empty epoch is an error unless asked for with
  // limit_train_batches=0 (which skips training on purpose, as upstream), and a resume checks it. Known before
  // the first epoch, so that a checkpoint taken before it (an early interrupt) resumes at epoch 0.
  num_train_batches_ = opt_.limit_train_batches.resolve(train.size(), "limit_train_batches");
  const BatchAmount& lim = opt_.limit_train_batches;
  const bool skip_asked = lim.is_fraction ? lim.fraction == 0.0 : lim.count == 0;
  VOLT_CHECK(train.size() > 0 || skip_asked, "Trainer::fit: the training loader has 0 batches (",
             train.dataset()->size(), " samples, batch_size=", train.options().batch_size,
             train.options().drop_last ? ", drop_last=true" : "",
             "); expected at least one training batch (pass limit_train_batches=0 to skip training on purpose)");
  VOLT_CHECK(num_train_batches_ > 0 || skip_asked, "Trainer::fit: limit_train_batches=", lim.fraction,
             " of the training loader's ", train.size(), " batches leaves 0 batches; expected a larger fraction "
             "(or limit_train_batches=0 to skip training on purpose)");
}

void Trainer::start_fit(data::DataLoader* val) {
  TrainModule& m = *module_;
  if (opt_.enable_model_summary && strategy_->is_global_zero())
    std::cout << model_summary(m, precision_name(precision_)) << "Memory: "
              << memory_report({strategy_->root_device()}) << "\n" << std::flush;
  fit_start_ = std::chrono::steady_clock::now();
  stage_ = Stage::train;
  for_each_callback(callbacks_, "on_fit_start", [&](Callback& c) { c.on_fit_start(*this, m); });
  {
    trace::Range range(trace::Layer::trainer, "[TrainModule]on_fit_start");
    m.on_fit_start();
  }

  if (val && opt_.num_sanity_val_steps != 0) {
    trace::Range range(trace::Layer::trainer, "[Trainer]sanity_check");
    run_validation(*val, /*sanity=*/true);
  }
  if (!pending_rng_.is_null()) {
    default_generator().manual_seed(pending_rng_.at("seed").get<uint64_t>());
    default_generator().set_offset(pending_rng_.at("offset").get<uint64_t>());
    pending_rng_ = nullptr;
  }

}

void Trainer::run_epochs(std::shared_ptr<data::DataLoader> train, std::shared_ptr<data::DataLoader> val) {
  int64_t loaded_epoch = epoch_;  // the epoch the current loaders were made for
  while (true) {
    if (max_epochs_ >= 0 && epoch_ >= max_epochs_) break;
    if (opt_.max_steps >= 0 && global_step_ >= opt_.max_steps) break;
    if (stop_agreed_ && (stop_allowed() || nonfinite_stop_)) break;
    if (time_exceeded()) break;
    if (poll_interrupt(/*every_step=*/true)) break;
    const int64_t reload_every = opt_.reload_dataloaders_every_n_epochs;
    if (fit_dm_ && reload_every > 0 && epoch_ > 0 && epoch_ % reload_every == 0 && epoch_ != loaded_epoch) {
      // New loaders from the DataModule for this epoch (the first epoch uses the ones fit started with).
      trace::Range range(trace::Layer::trainer, "[Trainer]reload_dataloaders");
      train = fit_dm_->train_dataloader();
      VOLT_CHECK(train != nullptr, "Trainer: reload_dataloaders_every_n_epochs: train_dataloader returned nullptr at "
                 "epoch ", epoch_);
      prepare_loader(*train, true);
      fit_train_ = train;
      if (has_val_) {
        if (auto fresh = fit_dm_->val_dataloader()) {
          prepare_loader(*fresh, false);
          val = std::move(fresh);
        }
      }
    }
    loaded_epoch = epoch_;
    {
      trace::Range range(trace::Layer::trainer, "run_training_epoch");
      train_epoch(*train, val.get());
    }
    if (interrupt_signal_ != 0) break;
  }
}

void Trainer::finish_fit() {
  TrainModule& m = *module_;
  step_graph_.reset();
  if (nonfinite_losses_ > 0 && strategy_->is_global_zero())
    logging::warn(fmt::format("Trainer: {} training step(s) had a NaN/Inf loss and were skipped{}", nonfinite_losses_,
                              nonfinite_stop_ ? "; fit stopped at the first (on_nonfinite_loss=stop)" : ""));
  stage_ = Stage::train;
  if (interrupt_signal_ != 0) {
    for_each_callback(callbacks_, "on_interrupt", [&](Callback& c) { c.on_interrupt(*this, m); });
  } else {
    for_each_callback(callbacks_, "on_fit_end", [&](Callback& c) { c.on_fit_end(*this, m); });
    trace::Range range(trace::Layer::trainer, "[TrainModule]on_fit_end");
    m.on_fit_end();
  }
  // fit never returns with a background checkpoint write in flight, nor with its failure unreported.
  for (auto& c : callbacks_)
    if (auto* a = dynamic_cast<AsyncCheckpointing*>(c.get())) a->finish(*strategy_);
  if (opt_.enable_model_summary && strategy_->is_global_zero())
    std::cout << "Memory at the end of fit: " << memory_report({strategy_->root_device()}) << "\n" << std::flush;
  detach(interrupt_signal_ != 0 ? RunStatus::interrupted : RunStatus::success);
}

bool Trainer::due_val_check(int64_t batch_idx) const {
  if (!has_val_ || !val_has_step_) return false;
  if ((epoch_ + 1) % opt_.check_val_every_n_epoch != 0) return false;
  int64_t interval = opt_.val_check_interval.is_fraction
                         ? std::max<int64_t>(1, static_cast<int64_t>(num_train_batches_ * opt_.val_check_interval.fraction))
                         : opt_.val_check_interval.count;
  if (opt_.val_check_interval.is_fraction && opt_.val_check_interval.fraction == 1.0) interval = num_train_batches_;
  return interval > 0 && (batch_idx + 1) % interval == 0;
}

void Trainer::step_schedulers(SchedulerInterval interval) {
  for (auto& s : schedulers_) {
    if (s.interval != interval) continue;
    int64_t count = interval == SchedulerInterval::step ? global_step_ : epoch_ + 1;
    if (count % s.frequency == 0) s.scheduler->step();
  }
}

}  // namespace volt
