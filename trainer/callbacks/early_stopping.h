#pragma once
/// @file
/// EarlyStopping: stops fit when a monitored metric stops improving (docs/trainer_contract.md "EarlyStopping").
///
/// Checked after every validation run (or at train epoch end when the fit has no validation loop). In order:
/// @code{.unparsed}
///   non-finite value (check_finite)                  -> stop
///   value beats stopping_threshold                   -> stop (goal reached)
///   value is worse than divergence_threshold         -> stop (diverged)
///   value improves on the best by more than min_delta -> best = value, wait = 0
///   otherwise wait += 1; wait >= patience            -> stop
/// @endcode
/// "Beats"/"improves" means lower for mode "min", higher for "max". The stop is requested through the Trainer,
/// which honours min_epochs/min_steps and makes every rank agree. The value is broadcast from rank 0 first,
/// so a rank_zero_only metric works too.
#include <limits>
#include <optional>
#include <string>

#include <volt/trainer/callback.h>

namespace volt {

struct EarlyStoppingOptions {
  std::string monitor;
  double min_delta = 0.0;
  int64_t patience = 3;
  std::string mode = "min";
  bool strict = true;        ///< a missing monitored metric is an error (else the check is skipped)
  bool check_finite = true;
  std::optional<double> stopping_threshold;
  std::optional<double> divergence_threshold;
  bool verbose = false;
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  std::string state_key() const override;
  bool runs_in_fast_dev_run() const override { return false; }
  bool is_monitoring() const override { return true; }
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// The decision for one value (updates best/wait). Returns true to stop; `reason` says why.
  bool evaluate(double value, std::string* reason = nullptr);
  int64_t wait_count() const { return wait_; }
  double best_score() const { return best_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }
  const std::string& stop_reason() const { return reason_; }

 private:
  void check(Trainer& trainer);
  bool better(double a, double b) const { return min_mode_ ? a < b : a > b; }
  EarlyStoppingOptions opt_;
  bool min_mode_;
  double best_;
  int64_t wait_ = 0;
  int64_t stopped_epoch_ = -1;
  std::string reason_;
};

}  // namespace volt
