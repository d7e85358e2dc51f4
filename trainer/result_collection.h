#pragma once
/// @file
/// ResultCollection: what log() records during one stage (train / validate / test) and how it becomes step
/// values and epoch values (docs/trainer_contract.md "Logging").
///
/// Epoch accumulation keeps a numerator and a denominator per name: for "mean" Σ(value·batch) and Σ(batch),
/// both in f64 (on the value's device, so nothing syncs with the host while the epoch runs). sync_dist epoch
/// values are reduced once, at epoch end: all numerators and denominators of the collection go through ONE
/// Collectives::reduce_values(Sum) call (plus one per min/max if used), so the result is the global weighted
/// mean even with uneven batch counts per rank. Step values with sync_dist are reduced in end_step(), again
/// one call per op for all of the step's values.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>
#include <volt/trainer/log_options.h>

namespace volt {

class Collectives;
namespace metrics {
class Metric;
}

enum class ReduceFx { Mean, Sum, Min, Max };
ReduceFx parse_reduce_fx(const std::string& s);

/// Per-hook defaults and permissions for log().
struct HookLogRules {
  bool allowed = false;
  bool default_on_step = false;
  bool default_on_epoch = false;
  bool step_allowed = true;  ///< false in epoch-level hooks: on_step=true there is an error
};
HookLogRules hook_log_rules(const std::string& hook);

class ResultCollection {
 public:
  explicit ResultCollection(std::string stage) : stage_(std::move(stage)) {}

  /// One log() call from `hook`. Value: a one-element tensor or a double. Throws volt::Error (naming the
  /// hook, the name and the problem) for both on_step/on_epoch false, a non-scalar value, on_step in an
  /// epoch-level hook, an unknown reduce_fx, or a name re-logged with different options.
  void log(const std::string& hook, const std::string& name, const Tensor& value, const LogOptions& o,
           int64_t batch_size);
  void log(const std::string& hook, const std::string& name, double value, const LogOptions& o,
           int64_t batch_size);
  void log_metric(const std::string& hook, const std::string& name, metrics::Metric& metric,
                  const LogOptions& o);

  /// Batch boundaries. end_step reduces this step's sync_dist values across ranks.
  void begin_step();
  void end_step(Collectives& strategy);
  /// Epoch end: computes every on_epoch value (sync_dist ones reduced across ranks), then computes and
  /// resets logged metric objects. (collective when any value is sync_dist or a metric is synced)
  void compute_epoch(Collectives& strategy);
  /// Forgets everything (start of an epoch / evaluation run).
  void reset();

  /// Graph capture of the training step (trainer/step_graph.h): while recording, log() calls are kept instead of
  /// taken (their tensors are the captured step's outputs, which every replay refills), and replay_logs() takes
  /// them after each replay. Logging a metric object while recording is an error (its update would be captured
  /// into state that an epoch reset replaces).
  struct Recorded {
    std::string hook, name;
    bool is_tensor = false;
    Tensor t;
    double d = 0;
    LogOptions o;
    int64_t batch_size = 0;
  };
  void start_recording();
  std::vector<Recorded> stop_recording();
  void replay_logs(const std::vector<Recorded>& logs);

  /// Views. Reading them copies device values to the host: call only when they are needed.
  /// Step views hold the values logged in the current step; epoch views the results of compute_epoch().
  std::map<std::string, double> step_logger_metrics() const;    ///< `name`, or `name_step` when on_epoch too
  std::map<std::string, double> step_pbar_metrics() const;
  std::map<std::string, double> step_callback_metrics() const;  ///< `name` and (if forked) `name_step`
  std::map<std::string, double> epoch_logger_metrics() const;   ///< `name`, or `name_epoch` when on_step too
  std::map<std::string, double> epoch_pbar_metrics() const;
  std::map<std::string, double> epoch_callback_metrics() const;  ///< `name` and (if forked) `name_epoch`
  bool has_step_values() const;
  /// Names logged with rank_zero_only (callbacks monitoring them get the value broadcast from rank 0).
  std::vector<std::string> rank_zero_only_names() const;

  const std::string& stage() const { return stage_; }

  /// Resolved options of one logged name.
  struct Resolved {
    bool on_step = false, on_epoch = false, prog_bar = false, logger = true, sync_dist = false,
         rank_zero_only = false;
    ReduceFx reduce = ReduceFx::Mean;
  };

 private:
  struct Entry {
    std::string name;
    Resolved opt;
    /// current step value
    bool has_step = false;
    bool step_is_tensor = false;
    Tensor step_t;  ///< detached, one element
    double step_d = 0;
    /// epoch accumulation
    bool has_acc = false;
    bool acc_is_tensor = false;
    Tensor acc_t;  ///< f64 scalar on the value's device
    double acc_d = 0;
    double weight = 0;  ///< Σ batch sizes (mean)
    metrics::Metric* metric = nullptr;
    /// epoch result
    bool has_epoch = false;
    double epoch_value = 0;
  };
  Entry& entry_for(const std::string& hook, const std::string& name, const LogOptions& o, bool is_metric);
  void accumulate(Entry& e, const Tensor* t, double d, int64_t batch_size);
  static double step_value(const Entry& e);
  bool forked(const Entry& e) const { return e.opt.on_step && e.opt.on_epoch; }

  std::string stage_;
  std::vector<std::unique_ptr<Entry>> entries_;  ///< in first-logged order
  std::set<std::string> warned_integer_;         ///< "hook/name" of integer values already warned about
  std::map<std::string, Entry*> by_name_;
  bool recording_ = false;
  std::vector<Recorded> recorded_;
};

}  // namespace volt
