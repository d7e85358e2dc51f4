// The Trainer's side of the loggers (trainer/loggers/logger.h): which loggers run, and what they receive when.
#include <algorithm>

#include <volt/runtime/log.h>
#include <volt/trainer/trainer.h>

namespace volt {

void Trainer::log_metrics(const MetricMap& metrics) {
  if (loggers_.empty() || metrics.empty()) return;
  log_to_loggers(metrics, std::max<int64_t>(global_step_ - 1, 0));
  for (const auto& [k, v] : metrics) logged_metrics_[k] = v;
}

void Trainer::setup_loggers(TrainModule& module) {
  if (loggers_set_up_) return;
  for (size_t i = 0; i < opt_.loggers.size(); ++i)
    VOLT_CHECK(opt_.loggers[i] != nullptr, "Trainer: loggers[", i, "] is null; expected a Logger");
  VOLT_CHECK(opt_.logger || opt_.loggers.empty(), "Trainer: logger=false with ", opt_.loggers.size(),
             " logger(s) in loggers; expected logger=true (the default) to use them, or no loggers for no logging");
  loggers_set_up_ = true;
  if (!opt_.logger || !strategy_->is_global_zero()) return;
  loggers_ = opt_.loggers;
  // The default logger writes metrics.csv whenever step rows are due (every log_every_n_steps steps).
  if (loggers_.empty())
    loggers_.push_back(std::make_shared<CSVLogger>(
        opt_.default_root_dir, CSVLoggerOptions{.flush_logs_every_n_steps = opt_.log_every_n_steps}));
  // Every version is settled before any logger creates its directory, so that loggers sharing a root and a
  // name (a CSVLogger and a TensorBoardLogger under <root>/lightning_logs) write into the same version_N.
  for (auto& l : loggers_) (void)l->version();
  // The run's precision goes with the module's hyperparameters (unless the module names one itself).
  nlohmann::json hp = module.hparams();
  if (hp.is_null()) hp = nlohmann::json::object();
  if (hp.is_object() && !hp.contains("precision")) hp["precision"] = precision_name(precision_);
  for (auto& l : loggers_) l->log_hyperparams(hp);
}

void Trainer::log_to_loggers(const MetricMap& m, int64_t step) {
  for (auto& l : loggers_) l->log_metrics(m, step);
}

void Trainer::log_step_metrics(ResultCollection& rc, int64_t step) {
  if (loggers_.empty()) return;
  MetricMap m = rc.step_logger_metrics();
  if (m.empty()) return;
  m["epoch"] = static_cast<double>(epoch_);
  log_to_loggers(m, step);
  logged_metrics_ = m;
}

void Trainer::log_epoch_metrics(ResultCollection& rc) {
  if (loggers_.empty()) return;
  MetricMap m = rc.epoch_logger_metrics();
  if (m.empty()) return;
  m["epoch"] = static_cast<double>(epoch_);
  log_to_loggers(m, eval_log_step());
  logged_metrics_ = m;
}

int64_t Trainer::eval_log_step() const {
  // Inside fit: the latest optimizer step's index. validate/test run on their own (e.g. test after fit): the
  // number of steps taken, as upstream writes it (its count of stepped batches).
  return fit_train_ ? std::max<int64_t>(global_step_ - 1, 0) : global_step_;
}

void Trainer::save_loggers() {
  for (auto& l : loggers_) l->save();
}

void Trainer::finalize_loggers(RunStatus status) {
  std::exception_ptr first;
  for (auto& l : loggers_) {
    try {
      l->finalize(status);
    } catch (const std::exception& e) {
      if (status == RunStatus::failed)
        logging::error("Trainer: finalizing logger '" + l->name() + "' failed: " + e.what());
      else if (!first)
        first = std::current_exception();
    } catch (...) {
      if (status != RunStatus::failed && !first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace volt
