#pragma once
/// @file
/// TorchMetrics-style metric objects: named states with a reduction, update / compute / reset, and a state-sync
/// hook so that a metric computed in a distributed run equals the metric over the whole data on one process
/// (docs/trainer_contract.md "Metrics with state").
/// F1, precision, recall and AUROC are NOT averages of per-rank values:
/// the states (tp/fp/fn/tn counters, gathered scores) are synced, then the metric is computed from them.
///
/// Usage:
/// @code
///   volt::metrics::F1Score f1({.task = Task::Multiclass, .num_classes = 10, .average = Average::Macro});
///   for (batch...) f1.update(logits, labels);   // logits (N, C) or class indices (N); labels (N) integer
///   double v = f1.compute().item();             // scalar f32 tensor on the metric's device
///   f1.reset();
/// @endcode
///
/// Threading: a metric object is not thread-safe. Inputs are detached (metrics never record autograd history).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt::metrics {

/// How a state combines across ranks (and across forward() batches).
/// @code{.unparsed}
///   Sum/Mean/Min/Max: elementwise over ranks (Mean = average over ranks).
///   Cat: the state is a list of tensors along dim 0; ranks' lists are gathered (lengths may differ) and
///        concatenated in rank order.
/// @endcode
enum class StateReduce { Sum, Mean, Min, Max, Cat };
const char* reduce_name(StateReduce r);

struct MetricState {
  std::string name;
  StateReduce reduce = StateReduce::Sum;
  /// The value reset() restores. For Cat states an empty tensor of shape (0, ...) that fixes the dtype and the
  /// trailing shape of the pieces.
  Tensor default_value;
  Tensor value;               ///< Sum/Mean/Min/Max: the current value, same shape and dtype as default_value
  std::vector<Tensor> parts;  ///< Cat: appended pieces, each (n_i, ...); concatenated lazily by cat_value()

  /// Cat: all pieces concatenated along dim 0 (shape (0, ...) when there are none). Other reductions: value.
  Tensor tensor() const;
  /// Replaces the content: for Cat the single piece `t` (shape (n, ...)), otherwise the value.
  void set(const Tensor& t);
  /// A deep copy (tensors cloned), for snapshots that a collective may overwrite in place.
  MetricState clone() const;
};

/// Replaces every state in `states` by its global value. Installed with Metric::set_sync_fn.
using StateSyncFn = std::function<void(std::vector<MetricState>& states)>;
/// Collectives used by sync_states_with. Every rank must call them in the same order (they are collectives).
/// @code{.unparsed}
///   AllReduceFn(local, op): op is Sum, Mean, Min or Max; returns the reduced tensor (same shape and dtype).
///   AllGatherUnevenFn(local): local is (n_r, ...) with n_r possibly different per rank; returns the per-rank
///   tensors in rank order (world_size entries, each (n_r, ...)).
/// @endcode
using AllReduceFn = std::function<Tensor(const Tensor& local, StateReduce op)>;
using AllGatherUnevenFn = std::function<std::vector<Tensor>(const Tensor& local)>;
/// The per-reduction sync logic, given the collectives: all-reduce for Sum/Mean/Min/Max states, all-gather and
/// concatenate for Cat states. States are visited in order, so every rank issues the same sequence of calls.
/// The distributed layer builds a StateSyncFn from this by supplying its collectives.
void sync_states_with(std::vector<MetricState>& states, const AllReduceFn& all_reduce,
                      const AllGatherUnevenFn& all_gather_uneven);
/// Concatenates tensors of equal trailing shape and dtype along dim 0 (any device; the result is on the
/// device of the first piece). Used for Cat states.
Tensor concat_dim0(const std::vector<Tensor>& pieces);

class Metric {
 public:
  Metric() = default;
  virtual ~Metric() = default;
  /// States are tensor handles; a copy would alias them.
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  /// Accumulates a batch into the states. `target` may be undefined for metrics of one input (MeanMetric's
  /// second input is the weight). Inputs may be on any device; the states stay on device().
  void update(const Tensor& preds, const Tensor& target = Tensor());
  /// The metric over everything accumulated since the last reset (over all ranks when a sync fn is set).
  /// With a sync fn: snapshots the local states, lets the sync fn replace them by global values, computes,
  /// then restores the local states so accumulation continues. Every rank must call compute() together then.
  Tensor compute();
  /// The metric over this batch alone (not synced), while also accumulating the batch into the states.
  Tensor forward(const Tensor& preds, const Tensor& target = Tensor());
  Tensor operator()(const Tensor& preds, const Tensor& target = Tensor()) { return forward(preds, target); }
  // Restores every state to its default and the update count to 0.
  void reset();
  int64_t update_count() const { return update_count_; }

  std::vector<MetricState>& states() { return states_; }
  const std::vector<MetricState>& states() const { return states_; }
  MetricState& state(const std::string& name);
  const MetricState& state(const std::string& name) const;

  void set_sync_fn(StateSyncFn fn) { sync_fn_ = std::move(fn); }
  bool has_sync_fn() const { return static_cast<bool>(sync_fn_); }

  /// Moves the states (and their defaults) to `device`; update() then accumulates there.
  Metric& to(Device device);
  Device device() const { return device_; }

  /// Class name for logs and errors, e.g. "MulticlassF1Score".
  virtual std::string name() const = 0;

 protected:
  /// Registers a state. Its value starts as a copy of `default_value` (moved to device()). Names are unique.
  void add_state(std::string name, Tensor default_value, StateReduce reduce);
  /// Helpers for update_impl: add `delta` to a Sum state, combine into a Min/Max state, append to a Cat state.
  /// `delta` may live anywhere; it is moved to the state's device.
  void accumulate(const std::string& name, const Tensor& delta);
  void append(const std::string& name, const Tensor& piece);

  virtual void update_impl(const Tensor& preds, const Tensor& target) = 0;
  /// Reads states() (already synced when a sync fn is set) and returns the result on device().
  virtual Tensor compute_impl() = 0;

 private:
  std::vector<MetricState> states_;
  int64_t update_count_ = 0;
  StateSyncFn sync_fn_;
  Device device_ = kCPU;
};

// ---- classification ------------------------------------------------------------------------------------
enum class Task { Binary, Multiclass };
/// Micro: counts summed over classes, then the score. Macro: unweighted mean of per-class scores over the
/// classes that occur (tp + fp + fn > 0, as TorchMetrics). None: the (C,) per-class scores.
/// Binary metrics ignore the average.
enum class Average { Micro, Macro, None };

struct ClassificationOptions {
  Task task = Task::Multiclass;
  int64_t num_classes = 0;  ///< Multiclass: required (>= 2). Binary: ignored
  Average average = Average::Micro;
  /// Binary: a float prediction p counts as positive when p > threshold. Float predictions outside [0, 1] are
  /// taken as logits and passed through a sigmoid first (TorchMetrics' rule).
  double threshold = 0.5;
  std::optional<int64_t> ignore_index = std::nullopt;  ///< targets equal to it are skipped
};

// Input formats accepted by every classification metric (preds, target):
//   Binary:     preds (N, ...) float probabilities/logits or integer/bool labels in {0, 1};
//               target (N, ...) integer or bool in {0, 1}, same shape as preds.
//   Multiclass: preds (N, C, ...) float scores (argmax over dim 1) or (N, ...) integer labels in [0, C);
//               target (N, ...) integer labels in [0, C).
// A floating target, a shape mismatch or an out-of-range label throws volt::Error naming the metric.

/// True/false positive/negative counters per class: states "tp", "fp", "tn", "fn", each (C,) i64 Sum
/// ((1,) for binary: the counts of the positive class). Derived metrics turn them into scores.
class StatScores : public Metric {
 public:
  explicit StatScores(ClassificationOptions options);
  const ClassificationOptions& options() const { return opt_; }
  int64_t num_classes() const { return counters_; }  // 1 for binary
  std::string name() const override;

 protected:
  void update_impl(const Tensor& preds, const Tensor& target) override;
  Tensor compute_impl() override;  ///< (C, 5) i64 [tp, fp, tn, fn, support] per class (C = 1 for binary)
  /// Per-class score from the four counts, and how the averages combine: for each kind below.
  enum class Kind { Accuracy, Precision, Recall, FBeta };
  Tensor reduce_scores(Kind kind, double beta = 1.0) const;
  virtual const char* kind_name() const { return "StatScores"; }

  ClassificationOptions opt_;
  int64_t counters_ = 1;
};

class Accuracy : public StatScores {
 public:
  explicit Accuracy(ClassificationOptions o) : StatScores(o) {}
 protected:
  Tensor compute_impl() override { return reduce_scores(Kind::Accuracy); }
  const char* kind_name() const override { return "Accuracy"; }
};
class Precision : public StatScores {
 public:
  explicit Precision(ClassificationOptions o) : StatScores(o) {}
 protected:
  Tensor compute_impl() override { return reduce_scores(Kind::Precision); }
  const char* kind_name() const override { return "Precision"; }
};
class Recall : public StatScores {
 public:
  explicit Recall(ClassificationOptions o) : StatScores(o) {}
 protected:
  Tensor compute_impl() override { return reduce_scores(Kind::Recall); }
  const char* kind_name() const override { return "Recall"; }
};
/// F-beta = (1 + b^2) tp / ((1 + b^2) tp + b^2 fn + fp); 0 when the denominator is 0.
class FBetaScore : public StatScores {
 public:
  FBetaScore(ClassificationOptions o, double beta);
  double beta() const { return beta_; }
 protected:
  Tensor compute_impl() override { return reduce_scores(Kind::FBeta, beta_); }
  const char* kind_name() const override { return "FBetaScore"; }
 private:
  double beta_;
};
class F1Score : public FBetaScore {
 public:
  explicit F1Score(ClassificationOptions o) : FBetaScore(o, 1.0) {}
 protected:
  const char* kind_name() const override { return "F1Score"; }
};

/// Confusion matrix: state "confmat" (C, C) i64 Sum, rows = true class, columns = predicted class (sklearn's
/// layout). Binary task: C = 2 (thresholded as above). compute() returns the (C, C) i64 counts.
class ConfusionMatrix : public Metric {
 public:
  explicit ConfusionMatrix(ClassificationOptions options);
  explicit ConfusionMatrix(int64_t num_classes)
      : ConfusionMatrix(ClassificationOptions{.task = Task::Multiclass, .num_classes = num_classes}) {}
  std::string name() const override;

 protected:
  void update_impl(const Tensor& preds, const Tensor& target) override;
  Tensor compute_impl() override;

 private:
  ClassificationOptions opt_;
  int64_t classes_;
};

/// Binary area under the ROC curve. preds (N, ...) float scores (probabilities or logits: AUROC depends only on
/// their order), target (N, ...) integer/bool in {0, 1}. States "preds" (f64) and "target" (i64) are Cat, so a
/// synced AUROC is exact. Computed by the trapezoidal rule over the ROC curve with tied scores forming one
/// threshold (equal to sklearn's roc_auc_score). With no positive or no negative sample the result is 0
/// (TorchMetrics' convention).
class BinaryAUROC : public Metric {
 public:
  explicit BinaryAUROC(std::optional<int64_t> ignore_index = std::nullopt);
  std::string name() const override { return "BinaryAUROC"; }

 protected:
  void update_impl(const Tensor& preds, const Tensor& target) override;
  Tensor compute_impl() override;

 private:
  std::optional<int64_t> ignore_index_;
};
/// Exact ROC AUC of host data (the function BinaryAUROC computes); scores and labels have equal length.
double roc_auc(const std::vector<double>& scores, const std::vector<int64_t>& labels);

// ---- aggregation ---------------------------------------------------------------------------------------
enum class NanStrategy { Ignore, Propagate, Error };  ///< Ignore drops NaN values (and their weights)

/// Weighted mean: update(value, weight) with value of any shape and weight undefined (1), a one-element
/// tensor, or the shape of value. States "mean_value" = sum(value * weight) and "weight" = sum(weight), both
/// f64 scalars with Sum reduce, so the synced mean is the mean over all ranks' values.
class MeanMetric : public Metric {
 public:
  explicit MeanMetric(NanStrategy nan = NanStrategy::Ignore);
  using Metric::update;
  void update(double value, double weight = 1.0);
  std::string name() const override { return "MeanMetric"; }

 protected:
  void update_impl(const Tensor& value, const Tensor& weight) override;
  Tensor compute_impl() override;

 private:
  NanStrategy nan_;
};

/// Sum, maximum or minimum of all values seen (state "value", f64 scalar, reduce Sum/Max/Min; the maximum of
/// nothing is -inf, the minimum +inf). update(value) takes a tensor of any shape; the second argument must be
/// undefined.
class ScalarAggregate : public Metric {
 public:
  using Metric::update;
  void update(double value);
  std::string name() const override { return name_; }

 protected:
  ScalarAggregate(StateReduce reduce, NanStrategy nan, std::string name);
  void update_impl(const Tensor& value, const Tensor& unused) override;
  Tensor compute_impl() override;

 private:
  StateReduce reduce_;
  NanStrategy nan_;
  std::string name_;
};
class SumMetric : public ScalarAggregate {
 public:
  explicit SumMetric(NanStrategy nan = NanStrategy::Ignore) : ScalarAggregate(StateReduce::Sum, nan, "SumMetric") {}
};
class MaxMetric : public ScalarAggregate {
 public:
  explicit MaxMetric(NanStrategy nan = NanStrategy::Ignore) : ScalarAggregate(StateReduce::Max, nan, "MaxMetric") {}
};
class MinMetric : public ScalarAggregate {
 public:
  explicit MinMetric(NanStrategy nan = NanStrategy::Ignore) : ScalarAggregate(StateReduce::Min, nan, "MinMetric") {}
};

}  // namespace volt::metrics
