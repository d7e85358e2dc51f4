// Trainer: construction, fit/validate/test/predict entry points and the epoch loop. The per-batch training
// step and the evaluation loop live in training_loop.cpp; checkpoints in checkpoint.cpp.
#include <volt/trainer/trainer.h>
#include <volt/trainer/strategies/dp.h>
#include <volt/trainer/strategies/fsdp.h>

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
#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/strategies/node_layout.h>
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
  VOLT_CHECK(opt_.accumulate_grad_batches >= 1, "Trainer: accumulate_grad_batches=", opt_.accumulate_grad_batches,
             " must be >= 1");
  VOLT_CHECK(opt_.check_val_every_n_epoch >= 1, "Trainer: check_val_every_n_epoch=", opt_.check_val_every_n_epoch,
             " must be >= 1");
  VOLT_CHECK(opt_.log_every_n_steps >= 1, "Trainer: log_every_n_steps=", opt_.log_every_n_steps, " must be >= 1");
  VOLT_CHECK(opt_.gradient_clip_val >= 0, "Trainer: gradient_clip_val=", opt_.gradient_clip_val, " must be >= 0");
  VOLT_CHECK(opt_.gradient_clip_algorithm == GradClipAlgorithm::norm ||
                 opt_.gradient_clip_algorithm == GradClipAlgorithm::value,
             "Trainer: gradient_clip_algorithm=", static_cast<int>(opt_.gradient_clip_algorithm),
             " is not a GradClipAlgorithm value");
  VOLT_CHECK(opt_.checkpoint_layout == CheckpointLayout::full || opt_.checkpoint_layout == CheckpointLayout::sharded,
             "Trainer: checkpoint_layout=", static_cast<int>(opt_.checkpoint_layout), " is not a CheckpointLayout value");
  VOLT_CHECK(opt_.max_epochs >= -1, "Trainer: max_epochs=", opt_.max_epochs, "; expected -1 (default) or >= 0");
  VOLT_CHECK(opt_.max_steps >= -1, "Trainer: max_steps=", opt_.max_steps, "; expected -1 (no limit) or >= 0");
  VOLT_CHECK(opt_.val_check_interval.is_fraction ? opt_.val_check_interval.fraction > 0
                                                 : opt_.val_check_interval.count > 0,
             "Trainer: val_check_interval must be a fraction in (0, 1] or a batch count >= 1");
  if (opt_.val_check_interval.is_fraction)
    VOLT_CHECK(opt_.val_check_interval.fraction <= 1.0, "Trainer: val_check_interval=",
               opt_.val_check_interval.fraction, " as a fraction must be in (0, 1]");
  VOLT_CHECK(opt_.fast_dev_run >= 0, "Trainer: fast_dev_run=", opt_.fast_dev_run,
             " must be >= 0 (0 = off, n = run n batches of each loop)");
  VOLT_CHECK(opt_.reload_dataloaders_every_n_epochs >= 0, "Trainer: reload_dataloaders_every_n_epochs=",
             opt_.reload_dataloaders_every_n_epochs, " must be >= 0 (0 = load once)");
  {
    const BatchAmount& ob = opt_.overfit_batches;
    VOLT_CHECK(ob.is_fraction ? ob.fraction >= 0 && ob.fraction <= 1 : ob.count >= 0, "Trainer: overfit_batches=",
               ob.is_fraction ? std::to_string(ob.fraction) : std::to_string(ob.count),
               "; expected a batch count >= 0 or a fraction in [0, 1] (0 = off)");
    overfit_ = ob.is_fraction ? ob.fraction > 0 : ob.count > 0;
  }
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

  DeviceSelection sel = parse_devices(opt_.accelerator, opt_.devices);
  if (opt_.auto_select_gpus && sel.accelerator == "gpu") {
    // devices="k": k GPUs that no other process is computing on, instead of the first k.
    int k = 0;
    VOLT_CHECK(std::sscanf(opt_.devices.c_str(), "%d", &k) == 1 && k > 0 && opt_.devices.find(',') == std::string::npos,
               "Trainer: auto_select_gpus needs devices to be a GPU count (e.g. \"2\"), got \"", opt_.devices, "\"");
    sel = parse_devices("gpu", pick_free_gpus(k), cuda_device_count());
  }
  sel.num_nodes = opt_.num_nodes;  // checked by make_strategy
  strategy_ = make_strategy(opt_.strategy, sel);
  configure_fsdp();
  configure_dp();
  apply_benchmark_option();
  if (strategy_->is_global_zero()) {
    // Which accelerator there is and which is used, as upstream's console says at start-up.
    const int gpus = cuda_available() ? cuda_device_count() : 0;
    const bool used = strategy_->root_device().is_cuda();
    std::cout << "GPU available: " << (gpus > 0 ? "True (cuda)" : "False") << ", used: " << (used ? "True" : "False")
              << "\n";
    if (gpus > 0 && !used)
      logging::warn("Trainer: a GPU is available but not used; pass accelerator=\"gpu\" (--accelerator gpu) to use "
                    "it");
  }
  check_precision_supported(precision_, strategy_->root_device());
  if (precision_ == Precision::f16_mixed) scaler_ = std::make_unique<GradScaler>(opt_.grad_scaler);

  callbacks_ = opt_.callbacks;
  if (opt_.fast_dev_run > 0) {
    // fast_dev_run saves nothing and never stops early: checkpointing and early stopping callbacks sit out.
    std::erase_if(callbacks_, [](const std::shared_ptr<Callback>& c) {
      return dynamic_cast<ModelCheckpoint*>(c.get()) != nullptr || dynamic_cast<EarlyStopping*>(c.get()) != nullptr;
    });
    if (strategy_->is_global_zero())
      std::cout << "Trainer: fast_dev_run=" << opt_.fast_dev_run << ": " << opt_.fast_dev_run
                << " batch(es) of training, validation, test and predict; logging and checkpointing are off\n";
  } else if (opt_.max_epochs == -1 && opt_.max_steps == -1 && strategy_->is_global_zero()) {
    logging::warn("Trainer: neither max_epochs nor max_steps is set; training stops after 1000 epochs (set "
                  "max_epochs or max_steps)");
  }
  bool has_ckpt = false;
  for (auto& c : callbacks_) has_ckpt |= dynamic_cast<ModelCheckpoint*>(c.get()) != nullptr;
  if (opt_.enable_checkpointing && !has_ckpt) callbacks_.push_back(std::make_shared<ModelCheckpoint>());
  pbar_ = std::make_unique<ProgressBar>();
  pbar_->set_enabled(opt_.enable_progress_bar && strategy_->is_global_zero());
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

void Trainer::configure_fsdp() {
  auto* fsdp = dynamic_cast<FSDPStrategy*>(strategy_.get());
  if (fsdp) {
    fsdp->set_wrap_policy({opt_.fsdp_min_num_params, opt_.fsdp_wrap});
    VOLT_CHECK(opt_.fsdp_min_num_params >= 0, "Trainer: fsdp_min_num_params=", opt_.fsdp_min_num_params,
               " must be >= 0 (0 turns auto-wrapping off)");
    return;
  }
  VOLT_CHECK(opt_.fsdp_min_num_params == 0 && opt_.fsdp_wrap.empty(), "Trainer: fsdp_min_num_params / fsdp_wrap "
             "are options of strategy=\"fsdp\", but the strategy is \"", strategy_->name(), "\"");
}

void Trainer::configure_dp() {
  const DType param_dtype = precision_param_dtype(precision_);
  if (auto* dp = dynamic_cast<DPStrategy*>(strategy_.get())) return dp->set_replicas(opt_.dp_replicas, param_dtype);
  if (auto* ddp2 = dynamic_cast<DDP2Strategy*>(strategy_.get()))
    return ddp2->set_replicas(opt_.dp_replicas, param_dtype);
  VOLT_CHECK(!opt_.dp_replicas, "Trainer: dp_replicas is an option of strategy=\"dp\" and \"ddp2\", but the strategy ",
             "is \"", strategy_->name(), "\"");
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

void Trainer::log_metrics(const MetricMap& metrics) {
  if (loggers_.empty() || metrics.empty()) return;
  log_to_loggers(metrics, std::max<int64_t>(global_step_ - 1, 0));
  for (const auto& [k, v] : metrics) logged_metrics_[k] = v;
}

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

void Trainer::prepare_loader(data::DataLoader& loader, bool training) {
  uint64_t seed = g_seed >= 0 ? static_cast<uint64_t>(g_seed) : loader.options().seed;
  bool shuffle = training && (loader.options().shuffle ||
                              dynamic_cast<const data::RandomSampler*>(loader.sampler().get()) != nullptr);
  if (shuffle && overfit_) {
    // Overfitting means the same batches every epoch.
    if (strategy_->is_global_zero())
      logging::warn("Trainer: overfit_batches is set but the training loader shuffles; shuffling is turned off");
    shuffle = false;
    if (strategy_->world_size() == 1)
      loader.set_sampler(std::make_shared<data::SequentialSampler>(loader.dataset()->size()));
  }
  if (shuffle && g_seed >= 0 && !loader.options().sampler && strategy_->world_size() == 1)
    loader.set_sampler(std::make_shared<data::RandomSampler>(loader.dataset()->size(), seed));
  strategy_->process_dataloader(loader, training, shuffle, seed);
}

std::optional<Batch> Trainer::fetch_batch(data::DataLoader& loader) {
  std::optional<Batch> b;
  {
    trace::Range range(trace::Layer::data, [&] { return "[DataLoader]" + (stage_ == Stage::none ? std::string("next") : std::string(name(stage_)) + "_next"); });
    b = loader.next();
  }
  if (b) {
    const Device dev = strategy_->root_device();
    trace::Range range(trace::Layer::data, "[Batch]to_device",
                       {dev, b->nbytes()});
    // Queued on the copy stream without making the compute stream wait yet: the caller's current step does not
    // wait for the next batch's copy; the loops call wait_for_upload() when they take the batch.
    b = convert_input(b->upload_ahead(dev));
  }
  return b;
}

void Trainer::enter_forward(std::optional<AutocastGuard>& guard) const {
  if (is_mixed(precision_)) guard.emplace(true, precision_autocast_dtype(precision_));
}

Batch Trainer::convert_input(Batch batch) const {
  const DType dt = precision_param_dtype(precision_);
  if (dt == DType::f32) return batch;
  batch.wait_for_upload();  // the casts below read it on the compute stream
  // Floating inputs, targets and fields follow the parameters (as upstream's half/double plugins convert the
  // batch); integer class indices stay as they are.
  auto convert = [dt](Tensor& t) {
    if (t.defined() && is_floating(t.dtype())) t = t.to(dt);
  };
  convert(batch.input);
  convert(batch.target);
  for (auto& [name, t] : batch.fields) convert(t);
  return batch;
}

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
  TrainModule& m = *module_;
  DetectAnomalyGuard anomaly(opt_.detect_anomaly || autograd::anomaly_enabled());
  if (val) prepare_loader(*val, false);
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
  // limit_val_batches = 0 disables validation (and with it the sanity check) entirely.
  if (val && opt_.limit_val_batches.resolve(val->size(), "limit_val_batches") == 0) val = nullptr;
  has_val_ = val != nullptr;
  callback_metrics_.clear();
  // Batches per epoch (train_epoch recomputes it): an empty epoch is an error unless asked for with
  // limit_train_batches=0 (which skips training on purpose, as upstream), and a resume checks it. Known before
  // the first epoch, so that a checkpoint taken before it (an early interrupt) resumes at epoch 0.
  num_train_batches_ = opt_.limit_train_batches.resolve(train->size(), "limit_train_batches");
  const BatchAmount& lim = opt_.limit_train_batches;
  const bool skip_asked = lim.is_fraction ? lim.fraction == 0.0 : lim.count == 0;
  VOLT_CHECK(train->size() > 0 || skip_asked, "Trainer::fit: the training loader has 0 batches (",
             train->dataset()->size(), " samples, batch_size=", train->options().batch_size,
             train->options().drop_last ? ", drop_last=true" : "",
             "); expected at least one training batch (pass limit_train_batches=0 to skip training on purpose)");
  VOLT_CHECK(num_train_batches_ > 0 || skip_asked, "Trainer::fit: limit_train_batches=", lim.fraction,
             " of the training loader's ", train->size(), " batches leaves 0 batches; expected a larger fraction "
             "(or limit_train_batches=0 to skip training on purpose)");
  if (!ckpt_path.empty()) {
    trace::Range range(trace::Layer::trainer, "[Trainer]restore_checkpoint");
    resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/true);
  }
  batches_done_ = resume_skip_;  // the position an interrupt before the first batch must record
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

  // After any restore: a captured step holds the optimizer state and parameters it was captured with.
  step_graph_.configure(opt_.cuda_graphs, strategy_->root_device(), step_graph_obstacle());
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

void Trainer::train_epoch(data::DataLoader& train, data::DataLoader* val) {
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
  bool validated_last = false;
  bool completed = true;
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
    {
      trace::Range range(trace::Layer::trainer, "run_training_batch");
      training_batch(batch, idx);
    }
    if (window_open_ && global_step_ >= window_end_) close_profile_window();
    batches_done_ = idx + 1;
    if (pbar_->enabled()) {
      MetricMap pm;
      if (pbar_->wants_refresh(idx)) {
        pm = last_pbar_;
        for (auto& [k, v] : results_train_.step_pbar_metrics()) pm[k] = v;
      }
      pbar_->update(idx, pm);
    }
    validated_last = false;
    if (val && due_val_check(idx) && !is_last_batch_) {
      trace::Range range(trace::Layer::trainer, "run_validation");
      run_validation(*val, false);
      validated_last = true;
    }
    // An interrupt on the epoch's last batch waits for the epoch end (run_fit polls again there), so the
    // checkpoint never holds a finished epoch without its epoch-end work; inside a gradient-accumulation
    // window it waits for the stepping batch, since checkpoints do not hold accumulated gradients.
    if (!is_last_batch_ && (idx + 1) % opt_.accumulate_grad_batches == 0 && poll_interrupt()) {
      train.reset();
      pbar_->finish(last_pbar_);
      return;  // no epoch-end work: the epoch is unfinished, and resumes from the batch after this one
    }
    bool hard_stop = (opt_.max_steps >= 0 && global_step_ >= opt_.max_steps) || nonfinite_stop_ || time_exceeded();
    // A stop requested on one rank mid-epoch is only acted on once agreed (after a validation run or at
    // epoch end), so no rank leaves the loop alone; with one process it takes effect after this batch.
    bool stop_now = strategy_->world_size() == 1 ? should_stop_ : stop_agreed_;
    if (hard_stop || (stop_now && stop_allowed())) {
      if (hard_stop) should_stop_ = true;
      completed = is_last_batch_;
      break;
    }
  }
  train.reset();
  pbar_->finish(last_pbar_);
  // "epoch" schedulers step before the epoch-end validation, so that a checkpoint written there already holds
  // the scheduler state of the next epoch (a resumed run then continues bit-identically).
  if (m.automatic_optimization) step_schedulers(SchedulerInterval::epoch);  // manual optimisation steps its own schedulers
  if (val && !validated_last && batches_done_ > 0 && due_val_check(batches_done_ - 1) &&
      (completed || batches_done_ == num_train_batches_)) {
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

void Trainer::step_schedulers(SchedulerInterval interval) {
  for (auto& s : schedulers_) {
    if (s.interval != interval) continue;
    int64_t count = interval == SchedulerInterval::step ? global_step_ : epoch_ + 1;
    if (count % s.frequency == 0) s.scheduler->step();
  }
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

// ---- evaluation entry points -------------------------------------------------------------------------------

std::vector<MetricMap> Trainer::run_eval_entry(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                               const char* stage, const std::string& ckpt_path) {
  VOLT_CHECK(loader != nullptr, "Trainer::", stage, ": no loader (the data module returned nullptr)");
  profile_start(stage);
  FailedRunGuard failed_run{*this};
  attach(module);
  prepare_loader(*loader, false);
  if (!ckpt_path.empty()) resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/false);
  bool is_test = std::string(stage) == "test";
  int64_t n = (is_test ? opt_.limit_test_batches : opt_.limit_val_batches)
                  .resolve(loader->size(), is_test ? "limit_test_batches" : "limit_val_batches");
  stage_ = is_test ? Stage::test : Stage::validate;
  module.eval();
  {
    trace::Range range(trace::Layer::trainer, is_test ? "run_test" : "run_validation");
    eval_loop(*loader, stage, n, false);
  }
  MetricMap cb = results_eval_.epoch_callback_metrics();
  update_callback_metrics(cb);
  log_epoch_metrics(results_eval_);
  MetricMap out = results_eval_.epoch_logger_metrics();
  if (is_test)
    for_each_callback(callbacks_, "on_test_end", [&](Callback& c) { c.on_test_end(*this, module); });
  if (strategy_->is_global_zero()) print_results_table(is_test ? "Test" : "Validate", out);
  module.train();
  detach();
  return {out};
}

std::vector<MetricMap> Trainer::validate(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                         const std::string& ckpt_path) {
  return run_eval_entry(module, std::move(loader), "validate", ckpt_path);
}
std::vector<MetricMap> Trainer::validate(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "validate");
  return validate(module, dm.val_dataloader(), ckpt_path);
}
std::vector<MetricMap> Trainer::test(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                     const std::string& ckpt_path) {
  return run_eval_entry(module, std::move(loader), "test", ckpt_path);
}
std::vector<MetricMap> Trainer::test(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "test");
  return test(module, dm.test_dataloader(), ckpt_path);
}

std::vector<Tensor> Trainer::predict(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                     const std::string& ckpt_path) {
  VOLT_CHECK(loader != nullptr, "Trainer::predict: no loader (the data module returned nullptr)");
  profile_start("predict");
  FailedRunGuard failed_run{*this};
  attach(module);
  prepare_loader(*loader, false);
  if (!ckpt_path.empty()) resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/false);
  int64_t n = opt_.limit_predict_batches.resolve(loader->size(), "limit_predict_batches");
  stage_ = Stage::predict;
  module.eval();
  NoGradGuard ng;
  std::vector<Tensor> out;
  pbar_->start("Predicting", n);
  loader->reset();
  for (int64_t i = 0; i < n; ++i) {
    auto b = fetch_batch(*loader);
    if (!b) break;
    b->wait_for_upload();
    std::optional<AutocastGuard> ac;
    enter_forward(ac);
    trace::Range range(trace::Layer::trainer, "[TrainModule]predict_step");
    strategy_->module_step_begin();
    out.push_back(module.predict_step(*b, i));
    strategy_->module_step_end();
    pbar_->update(i);
  }
  loader->reset();
  pbar_->finish();
  module.train();
  detach();
  return out;
}
std::vector<Tensor> Trainer::predict(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "predict");
  return predict(module, dm.predict_dataloader(), ckpt_path);
}

void Trainer::print_results_table(const std::string& stage, const MetricMap& m) const {
  std::string head = stage + " metric";
  size_t w = head.size();
  for (auto& [k, v] : m) w = std::max(w, k.size());
  w += 2;
  std::string line(w + 22, '-');
  std::ostringstream os;
  os << line << "\n" << std::left << std::setw(static_cast<int>(w)) << head << "DataLoader 0\n" << line << "\n";
  for (auto& [k, v] : m) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    os << std::setw(static_cast<int>(w)) << k << buf << "\n";
  }
  os << line << "\n";
  std::cout << os.str() << std::flush;
}

}  // namespace volt
