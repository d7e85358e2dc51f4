#pragma once
/// @file
/// The Trainer's captured training step (TrainerOptions::cuda_graphs; kernels/graph.h). After a few eager steps
/// (which create the optimizer state and the library plans the capture must find ready), the next step is
/// captured once as a Graph: forward, loss, backward, gradient clipping and the optimizer updates. Every later
/// batch of the same shapes is copied into the captured step's input tensors and the graph replayed: one launch
/// instead of the host's per-op work. A batch of other shapes (a last partial batch) runs eagerly; the graph stays.
///
/// What stays on the host, per step, outside the graph: on_train_batch_start/end, the step counter, the
/// schedulers (a changed learning rate reaches the captured optimizer through its dynamic block), and the
/// training_step's log() calls, which are recorded at the capture and taken again after every replay from the
/// captured output tensors (a logged host number is frozen at its captured value).
///
/// What disqualifies a step (the reason is logged once; with cuda_graphs = on it is an error): a strategy other
/// than single_device or ddp over one process, manual optimisation, gradient accumulation, 16-mixed (its
/// GradScaler reads the device), on_nonfinite_loss other than ignore (a host read of the loss), detect_anomaly,
/// an ops or advanced profiler (the simple one times a replay as "[StepGraph]replay"); under cuda_graphs =
/// automatic also the CPU and a module that does not declare a static step (TrainModule::static_training_step). A capture that fails (an op that reads the device or synchronises inside
/// the step) turns graphs off for the rest of the fit with a warning (cuda_graphs = automatic) or an error (on).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/data/batch.h>
#include <volt/kernels/graph.h>
#include <volt/nn/optim.h>
#include <volt/trainer/result_collection.h>
#include <volt/trainer/trainer_options.h>

namespace volt {

class StepGraph {
 public:
  /// Eager steps before the capture.
  static constexpr int kWarmupSteps = 2;

  /// At fit start. `why_not`: what disqualifies the step ("" when nothing does). Logs the decision's reason.
  void configure(CudaGraphs mode, Device device, const std::string& why_not);
  bool enabled() const { return enabled_; }
  /// Runs the training step of `batch` through the graph: `body(b)` runs the step's device part on batch b (inputs
  /// on the device) and returns its detached loss; it is called once, inside the capture, and never again.
  /// `may_capture`: whether this batch may be the captured one (not an epoch's last batch, which may be short).
  /// Returns false when this batch must run eagerly instead (warm-up, other shapes, a refused replay); then
  /// nothing ran. On true, *loss is this step's loss (a fresh tensor) and `results` has its log() calls.
  bool run(const data::Batch& batch, bool may_capture, ResultCollection& results,
           const std::function<Tensor(const data::Batch&)>& body,
           const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers, Tensor* loss);
  /// Drops the graph (end of fit, or the parameters or optimizer state were replaced).
  void reset();

  int64_t captures() const { return captures_; }
  int64_t replays() const { return graph_ ? graph_->replays() + replays_before_ : replays_before_; }
  /// Recorded operations of the last capture (CPU kernel calls, or CUDA graph nodes); 0 before any.
  size_t num_nodes() const { return nodes_; }
  /// Why graphs are off ("" while enabled).
  const std::string& disabled_reason() const { return reason_; }

 private:
  bool capture(const data::Batch& batch, ResultCollection& results, const std::function<Tensor(const data::Batch&)>& body,
               const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers);
  void disable(const std::string& why);

  CudaGraphs mode_ = CudaGraphs::off;
  Device device_ = kCPU;
  bool enabled_ = false;
  std::string reason_;
  int warmup_left_ = kWarmupSteps;
  std::unique_ptr<Graph> graph_;
  data::Batch static_batch_;  ///< the captured step's inputs
  Tensor static_loss_;
  std::vector<ResultCollection::Recorded> logs_;
  size_t nodes_ = 0;
  uint64_t flops_per_replay_ = 0;  ///< what the captured ops counted (trace::count_flops), re-counted per replay
  int64_t captures_ = 0;
  int64_t replays_before_ = 0;  ///< replays of graphs dropped since
};

}  // namespace volt
