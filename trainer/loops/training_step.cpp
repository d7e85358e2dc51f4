// The Trainer's per-batch training step: forward, backward, gradient clipping and the optimizer updates
// (automatic and manual optimisation), NaN/Inf losses, and the captured step (trainer/step_graph.h).
#include <cmath>
#include <typeinfo>

#include <fmt/format.h>

#include <volt/kernels/ops.h>
#include <volt/nn/clip_grad.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/connectors/callback_calls.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/trainer.h>

namespace volt {

void Trainer::training_batch(const Batch& batch, int64_t batch_idx) {
  TrainModule& m = *module_;
  int64_t bs = batch.size();
  const int64_t step_before = global_step_;
  stepped_last_batch_ = false;
  results_train_.begin_step();
  {
    LogScope s(m, &results_train_, "on_train_batch_start", bs);
    if (!m.on_train_batch_start(batch, batch_idx)) return;
  }
  Tensor loss;
  bool skipped = false;  // on_nonfinite_loss dropped this batch: no backward, step or module batch-end hook
  // An epoch's last batch may be short: never the one captured (a later full batch would not fit it).
  if (step_graph_.run(
          batch, !is_last_batch_, results_train_, [&](const Batch& b) { return captured_step(b, batch_idx, bs); },
          optimizers_, &loss)) {
    // The replay ran forward, backward and the updates; the host tail stays here.
    strategy_->module_step_begin();
    finish_optimizer_step();
  } else if (loss = forward_loss(batch, batch_idx, bs); !m.automatic_optimization) {
    // The module stepped its optimizers itself (ManualOptimizer::step counts the global steps).
    if (loss.defined()) loss = loss.detach();
  } else if (loss.defined()) {
    check_training_loss(loss);
    int64_t n = opt_.accumulate_grad_batches;
    bool step_now = (batch_idx + 1) % n == 0 || is_last_batch_;
    skipped = skip_nonfinite_loss(loss);
    if (!skipped) backward_and_step(n > 1 ? loss / static_cast<double>(n) : loss, bs, step_now, /*host_tail=*/true);
    loss = loss.detach();
  }
  strategy_->module_step_end();
  if (!skipped) {
    LogScope s(m, &results_train_, "on_train_batch_end", bs);
    m.on_train_batch_end(loss, batch, batch_idx);
  }
  {
    trace::Range range(trace::Layer::trainer, "[Trainer]end_step");
    results_train_.end_step(*strategy_);
  }
  // Whether the step counter advanced: an automatic step, or (manual optimisation) any ManualOptimizer::step.
  stepped_last_batch_ = global_step_ > step_before;
  batches_done_ = batch_idx + 1;  // a checkpoint taken by a callback below resumes with the next batch
  // Step rows every log_every_n_steps optimizer steps: after an automatic step, or after the steps a manually
  // optimised module took in this batch (which may be several, or none).
  const int64_t every = opt_.log_every_n_steps;
  if (stepped_last_batch_ && global_step_ / every > step_before / every) log_step_metrics(results_train_, global_step_ - 1);
  for_each_callback(callbacks_, "on_train_batch_end", [&](Callback& c) { c.on_train_batch_end(*this, m, loss, batch, batch_idx); });
}

Tensor Trainer::forward_loss(const Batch& batch, int64_t batch_idx, int64_t bs) {
  TrainModule& m = *module_;
  std::optional<AutocastGuard> ac;  // mixed precision: forward and loss under autocast
  enter_forward(ac);
  strategy_->module_step_begin();
  StepOutput out;
  {
    LogScope s(m, &results_train_, "training_step", bs);
    out = strategy_->run_step(m, batch,
                              [&](TrainModule& r, const Batch& b) { return r.training_step_outputs(b, batch_idx); });
  }
  LogScope s(m, &results_train_, "training_step_end", bs);
  return m.training_step_end(out);
}

void Trainer::backward_and_step(const Tensor& scaled, int64_t bs, bool step_now, bool host_tail) {
  TrainModule& m = *module_;
  {
    LogScope s(m, &results_train_, "on_before_backward", bs);
    m.on_before_backward(scaled);
  }
  // 16-mixed: backward from loss * scale (the hooks above and below see the unscaled loss).
  {
    trace::Range range(trace::Layer::trainer, "[Strategy]backward");
    strategy_->backward(scaler_ ? scaler_->scale_loss(scaled) : scaled, step_now);
  }
  {
    LogScope s(m, &results_train_, "on_after_backward", bs);
    m.on_after_backward();
  }
  if (step_now) {
    trace::Range range(trace::Layer::trainer, "optimizer_step");
    optimizer_updates();
    if (host_tail) finish_optimizer_step();
  }
}

void Trainer::check_training_loss(const Tensor& loss) const {
  const TrainModule& m = *module_;
  VOLT_CHECK(loss.numel() == 1, m.type_name(), "::training_step returned a tensor of shape ", loss.shape_str(),
             "; expected a scalar loss (or an undefined Tensor to skip the batch)");
  VOLT_CHECK(loss.requires_grad(), m.type_name(), "::training_step returned a loss that does not require grad ",
             "(was it computed under NoGradGuard or from detached tensors?)");
}

Tensor Trainer::captured_step(const Batch& batch, int64_t batch_idx, int64_t bs) {
  TrainModule& m = *module_;
  Tensor loss = forward_loss(batch, batch_idx, bs);
  VOLT_CHECK(loss.defined(), m.type_name(), "::training_step returned an undefined loss (skip the batch) while the "
             "step was being captured; a captured step must compute a loss for every batch");
  check_training_loss(loss);
  backward_and_step(loss, bs, /*step_now=*/true, /*host_tail=*/false);
  return loss.detach();
}

std::string Trainer::step_graph_obstacle() const {
  const TrainModule& m = *module_;
  // DDP over one process reduces nothing (its reducer only keeps host bookkeeping, which a captured step runs
  // whole, at the capture): the same step as single_device.
  const bool one_process_ddp = strategy_->name() == "ddp" && strategy_->world_size() == 1;
  if (strategy_->name() != "single_device" && !one_process_ddp)
    return fmt::format("strategy \"{}\" with {} process(es) (single_device and one-process ddp steps are captured)",
                       strategy_->name(), strategy_->world_size());
  if (!m.automatic_optimization) return "manual optimisation";
  if (optimizers_.empty()) return "no optimizer";
  // Only these read their per-step values (learning rate, step count) from device memory under capture; any
  // other optimizer, a subclass included, would replay the numbers of the captured step.
  for (const auto& o : optimizers_) {
    const optim::Optimizer& opt = *o;
    const std::type_info& t = typeid(opt);
    if (t != typeid(optim::SGD) && t != typeid(optim::Adam) && t != typeid(optim::AdamW))
      return fmt::format("optimizer {} (only SGD, Adam and AdamW keep their per-step values right under capture)",
                         o->type_name());
  }
  if (opt_.accumulate_grad_batches != 1) return "accumulate_grad_batches > 1";
  if (scaler_) return "precision 16-mixed (its GradScaler reads the device every step)";
  if (opt_.on_nonfinite_loss != NonFiniteLoss::ignore) return "on_nonfinite_loss != ignore (it reads every loss on the host)";
  if (opt_.detect_anomaly || autograd::anomaly_enabled()) return "detect_anomaly (it reads every op's output on the host)";
  // The simple profiler times the host's actions only, a replay included ("[StepGraph]replay"); the others time
  // each op of the step, which a replay does not run on the host.
  if (profiler_ && profiler_->kind() != ProfilerKind::simple)
    return "a profiler that times ops is active (ops/advanced; the simple profiler keeps the graph)";
  if (opt_.cuda_graphs == CudaGraphs::automatic) {
    if (!strategy_->root_device().is_cuda()) return "the CPU (cuda_graphs=on records CPU steps, for testing)";
    if (!m.static_training_step())
      return fmt::format("{} does not declare a static training step (TrainModule::static_training_step)", m.type_name());
  }
  return "";
}

bool Trainer::skip_nonfinite_loss(const Tensor& loss) {
  if (opt_.on_nonfinite_loss == NonFiniteLoss::ignore) return false;
  const bool local_bad = !std::isfinite(loss.detach().to(DType::f32).item());
  // Any rank's non-finite loss skips the step on every rank: otherwise the others would wait in the gradient
  // all-reduce of a backward this rank never runs.
  if (!strategy_->reduce_decision(local_bad, /*all=*/false)) return false;
  ++nonfinite_losses_;
  // The accumulation window is lost with this batch: a partial window's gradients would otherwise be stepped
  // with the wrong scale.
  for (auto& o : optimizers_) o->zero_grad();
  strategy_->discard_gradients();
  if (opt_.on_nonfinite_loss == NonFiniteLoss::stop) nonfinite_stop_ = should_stop_ = stop_agreed_ = true;
  return true;
}

void Trainer::optimizer_updates() {
  TrainModule& m = *module_;
  {
    trace::Range range(trace::Layer::comm, "[Strategy]finish_gradient_sync");
    strategy_->finish_gradient_sync();
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    optim::Optimizer& o = *optimizers_[i];
    // 16-mixed: gradients unscaled (and checked for inf/NaN, agreed by all ranks) before the hook and clipping
    // see them; a non-finite step is skipped on every rank and the scale backs off.
    bool skip = false;
    if (scaler_) {
      trace::Range range(trace::Layer::optim, "[GradScaler]unscale");
      skip = scaler_->unscale_(o, *strategy_);
    }
    {
      LogScope s(m, &results_train_, "on_before_optimizer_step", m.batch_size_);
      m.on_before_optimizer_step(o, static_cast<int>(i));
    }
    if (!skip && opt_.gradient_clip_val > 0) {
      trace::Range range(trace::Layer::optim, "[Trainer]clip_gradients");
      std::vector<Tensor> params;
      for (auto& g : o.param_groups())
        for (auto& p : g.params) params.push_back(p);
      // No host read: the total norm and the clip coefficient stay on the device (the strategy's norm: over
      // every rank's shard under ZeRO).
      if (opt_.gradient_clip_algorithm == GradClipAlgorithm::norm) strategy_->clip_grad_norm(params, opt_.gradient_clip_val);
      else nn::clip_grad_value_(params, opt_.gradient_clip_val);
    }
    if (scaler_) scaler_->step(o, *strategy_);  // already unscaled: steps unless inf/NaN, counts a skip
    else o.step();
    strategy_->after_optimizer_step(o);
    {
      LogScope s(m, &results_train_, "on_before_zero_grad", m.batch_size_);
      m.on_before_zero_grad(o);
    }
    o.zero_grad();
  }
  if (scaler_) scaler_->update();
}

void Trainer::finish_optimizer_step() {
  // A step skipped by the scaler still counts (as upstream): schedulers and loop limits advance.
  ++global_step_;
  step_schedulers(SchedulerInterval::step);
}

void Trainer::manual_backward(const Tensor& loss) {
  TrainModule& m = *module_;
  VOLT_CHECK(!m.automatic_optimization, "manual_backward: ", m.type_name(), " uses automatic optimisation; set "
             "automatic_optimization = false to call manual_backward");
  VOLT_CHECK(loss.defined() && loss.requires_grad(), "manual_backward: the loss is undefined or does not require grad");
  {
    LogScope s(m, &results_train_, "on_before_backward", m.batch_size_);
    m.on_before_backward(loss);
  }
  strategy_->backward(scaler_ ? scaler_->scale_loss(loss) : loss, manual_sync_grad_);
  if (manual_sync_grad_) strategy_->finish_gradient_sync();
  {
    LogScope s(m, &results_train_, "on_after_backward", m.batch_size_);
    m.on_after_backward();
  }
}

void Trainer::manual_optimizer_step(optim::Optimizer& o, int index) {
  TrainModule& m = *module_;
  {
    LogScope s(m, &results_train_, "on_before_optimizer_step", m.batch_size_);
    if (scaler_) scaler_->unscale_(o, *strategy_);  // the hook sees true gradient values
    m.on_before_optimizer_step(o, index);
  }
  if (scaler_) {
    // Manual optimisation under 16-mixed: each ManualOptimizer::step unscales, steps unless inf/NaN, updates.
    scaler_->step(o, *strategy_);
    scaler_->update();
  } else {
    o.step();
  }
  strategy_->after_optimizer_step(o);
  ++global_step_;
}

}  // namespace volt
