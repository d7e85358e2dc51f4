#include <volt/trainer/step_graph.h>

#include <exception>

#include <fmt/format.h>

#include <volt/kernels/ops.h>
#include <volt/runtime/error.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/log.h>
#include <volt/runtime/trace.h>

namespace volt {

namespace {

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device());
}

// Whether `batch` fits the captured step's inputs (same tensors' shapes, dtypes and devices, same fields).
bool fits(const data::Batch& batch, const data::Batch& captured) {
  if (!same_layout(batch.input, captured.input) || !same_layout(batch.target, captured.target)) return false;
  if (batch.fields.size() != captured.fields.size()) return false;
  for (const auto& [name, t] : batch.fields) {
    auto it = captured.fields.find(name);
    if (it == captured.fields.end() || !same_layout(t, it->second)) return false;
  }
  return true;
}

Tensor copy_of(const Tensor& t) { return t.defined() ? t.detach().clone() : Tensor(); }

void copy_into(const Tensor& dst, const Tensor& src) {
  if (!dst.defined()) return;
  NoGradGuard ng;
  Tensor(dst).copy_(src);
}

}  // namespace

void StepGraph::configure(CudaGraphs mode, Device device, const std::string& why_not) {
  reset();
  mode_ = mode;
  device_ = device;
  warmup_left_ = kWarmupSteps;
  captures_ = 0;
  nodes_ = 0;
  replays_before_ = 0;
  enabled_ = false;
  reason_.clear();
  if (mode == CudaGraphs::off) {
    reason_ = "cuda_graphs=off";
    return;
  }
  if (!why_not.empty()) {
    VOLT_CHECK(mode != CudaGraphs::on, "Trainer: cuda_graphs=on, but the training step cannot be captured: ", why_not);
    reason_ = why_not;
    logging::debug(fmt::format("Trainer: the training step runs eagerly (not captured as a graph): {}", why_not));
    return;
  }
  enabled_ = true;
}

void StepGraph::reset() {
  if (graph_) replays_before_ += graph_->replays();
  graph_.reset();
  static_batch_ = data::Batch();
  static_loss_ = Tensor();
  logs_.clear();
}

void StepGraph::disable(const std::string& why) {
  reset();
  enabled_ = false;
  reason_ = why;
  logging::warn(fmt::format("Trainer: training steps run eagerly from now on: {}", why));
}

bool StepGraph::capture(const data::Batch& batch, ResultCollection& results,
                        const std::function<Tensor(const data::Batch&)>& body,
                        const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {
  reset();
  // The captured step's inputs: copies made before the capture, refilled before every replay.
  static_batch_.input = copy_of(batch.input);
  static_batch_.target = copy_of(batch.target);
  for (const auto& [name, t] : batch.fields) static_batch_.fields[name] = copy_of(t);
  if (device_.is_cuda()) {
    // The capture cannot reuse the blocks the eager steps left cached (they stay in the general pool) and cannot
    // free them while it runs: hand them back to the driver first, or the capture may run out of memory.
    synchronize(device_);
    empty_cache(device_);
  }
  graph_ = std::make_unique<Graph>(device_);
  results.start_recording();
  const uint64_t flops_before = trace::flops_counted();
  std::string failure;
  try {
    graph_->capture_begin();
    Tensor loss = body(static_batch_);
    graph_->capture_end();
    static_loss_ = loss;
    logs_ = results.stop_recording();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an exception that is not a std::exception";
  }
  if (!failure.empty()) {
    graph_->capture_abort();
    graph_.reset();
    results.stop_recording();
    static_batch_ = data::Batch();
    // Gradients the captured backward assigned were never computed: the eager step must start without them.
    for (const auto& o : optimizers) o->zero_grad(true);
    const std::string why = fmt::format("capturing the training step failed: {}", failure);
    VOLT_CHECK(mode_ != CudaGraphs::on, "Trainer: cuda_graphs=on: ", why);
    disable(why);
    return false;
  }
  // FLOPs are counted by the ops' host code, which only the capture ran: each later replay adds the same.
  flops_per_replay_ = trace::flops_counted() - flops_before;
  graph_->keep(static_loss_);
  ++captures_;
  nodes_ = graph_->num_nodes();
  // The capture ran nothing: this batch's step is the first replay.
  if (!graph_->replay()) {
    disable("the captured step refused its first replay");
    return false;
  }
  return true;
}

bool StepGraph::run(const data::Batch& batch, bool may_capture, ResultCollection& results,
                    const std::function<Tensor(const data::Batch&)>& body,
                    const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers, Tensor* loss) {
  if (!enabled_) return false;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  if (graph_ && !fits(batch, static_batch_)) return false;  // e.g. a last partial batch: eager, graph kept
  bool ran = false;
  if (graph_) {
    {
      trace::Range range(trace::Layer::trainer, "[StepGraph]replay");
      copy_into(static_batch_.input, batch.input);
      copy_into(static_batch_.target, batch.target);
      for (auto& [name, t] : static_batch_.fields) copy_into(t, batch.fields.at(name));
      ran = graph_->replay();
    }
    if (ran) trace::count_flops(flops_per_replay_);
    // Refused (an optimizer's flags, groups or state changed): capture the step as it is now.
    else if (may_capture) ran = capture(batch, results, body, optimizers);
  } else if (may_capture) {
    ran = capture(batch, results, body, optimizers);
  }
  if (!ran) return false;
  trace::Range range(trace::Layer::trainer, "[StepGraph]replay_logs");
  results.replay_logs(logs_);
  // A tensor of its own: callbacks may keep the loss, and the next replay overwrites the captured one.
  *loss = static_loss_.clone();
  return true;
}

}  // namespace volt
