#include <volt/trainer/callbacks/early_stopping.h>

#include <cmath>
#include <sstream>

#include <volt/runtime/log.h>
#include <volt/trainer/trainer.h>

namespace volt {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : opt_(std::move(options)) {
  VOLT_CHECK(!opt_.monitor.empty(), "EarlyStopping: monitor is empty; name the logged metric to watch");
  VOLT_CHECK(opt_.mode == "min" || opt_.mode == "max", "EarlyStopping: mode=\"", opt_.mode,
             "\"; expected \"min\" or \"max\"");
  VOLT_CHECK(opt_.patience >= 0, "EarlyStopping: patience=", opt_.patience, " must be >= 0");
  min_mode_ = opt_.mode == "min";
  opt_.min_delta = std::fabs(opt_.min_delta);
  best_ = min_mode_ ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{monitor=" + opt_.monitor + ",mode=" + opt_.mode + "}";
}

bool EarlyStopping::evaluate(double v, std::string* reason) {
  std::ostringstream why;
  bool stop = false;
  if (opt_.check_finite && !std::isfinite(v)) {
    why << "monitored metric " << opt_.monitor << " = " << v << " is not finite; previous best " << best_;
    stop = true;
  } else if (opt_.stopping_threshold && better(v, *opt_.stopping_threshold)) {
    why << "stopping threshold reached: " << opt_.monitor << " = " << v << (min_mode_ ? " < " : " > ")
        << *opt_.stopping_threshold;
    stop = true;
  } else if (opt_.divergence_threshold && better(*opt_.divergence_threshold, v)) {
    why << "divergence threshold: " << opt_.monitor << " = " << v << (min_mode_ ? " > " : " < ")
        << *opt_.divergence_threshold;
    stop = true;
  } else if (better(min_mode_ ? v + opt_.min_delta : v - opt_.min_delta, best_)) {
    best_ = v;
    wait_ = 0;
  } else {
    ++wait_;
    if (wait_ >= opt_.patience) {
      why << "monitored metric " << opt_.monitor << " did not improve in the last " << wait_
          << " checks; best score " << best_;
      stop = true;
    }
  }
  if (stop && reason) *reason = why.str();
  return stop;
}

void EarlyStopping::check(Trainer& trainer) {
  if (trainer.sanity_checking()) return;
  MetricMap m = trainer.callback_metrics();
  auto it = m.find(opt_.monitor);
  std::optional<double> agreed =
      trainer.strategy().agreed_value(it != m.end() ? std::optional<double>(it->second) : std::nullopt);
  if (!agreed) {
    if (!opt_.strict) return;
    std::ostringstream avail;
    for (auto& [k, v] : m) avail << " " << k;
    VOLT_FAIL("EarlyStopping: the monitored metric \"", opt_.monitor,
              "\" was not logged; available metrics:", avail.str(), " (set strict=false to skip missing values)");
  }
  const double v = *agreed;
  std::string why;
  bool stop = trainer.strategy().reduce_decision(evaluate(v, &why), /*all=*/false);
  if (stop) {
    stopped_epoch_ = trainer.current_epoch();
    reason_ = why;
    trainer.request_stop();
    if (opt_.verbose && trainer.strategy().is_global_zero()) logging::info("EarlyStopping: " + why);
  }
}

void EarlyStopping::on_validation_end(Trainer& trainer, TrainModule&) { check(trainer); }

void EarlyStopping::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (!trainer.has_validation()) check(trainer);
}

nlohmann::json EarlyStopping::state_dict() const {
  return {{"wait_count", wait_}, {"stopped_epoch", stopped_epoch_}, {"best_score", best_}, {"patience", opt_.patience}};
}

void EarlyStopping::load_state_dict(const nlohmann::json& s) {
  wait_ = s.value("wait_count", int64_t{0});
  stopped_epoch_ = s.value("stopped_epoch", int64_t{-1});
  if (s.contains("best_score") && s.at("best_score").is_number()) best_ = s.at("best_score").get<double>();
}

}  // namespace volt
