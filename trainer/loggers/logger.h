#pragma once
/// @file
/// Logger: where the Trainer sends logged metrics and hyperparameters (the upstream Logger contract).
/// CSVLogger (trainer/loggers/csv_logger.h) and TensorBoardLogger (trainer/loggers/tensorboard_logger.h) implement it; a user
/// subclass passed in TrainerOptions::loggers receives the same calls.
///
/// The Trainer calls its loggers on rank 0 only (Strategy::is_global_zero()); a logger built on every rank of a
/// DDP launch is simply never used on the others, so a logger must not touch the file system before its first
/// call. At the first fit/validate/test/predict the Trainer asks every logger for version() before any of them
/// writes (loggers sharing a root and name then agree on version_N), then calls log_hyperparams(module.hparams())
/// once. After that:
/// @code
///   log_metrics(metrics, step)  one row: "epoch" is among the metrics, `step` is the index of the latest
///                               optimizer step (global_step - 1, at least 0), as in metrics.csv;
///   save()                      at the end of every training epoch;
///   finalize(status)            at the end of every fit/validate/test/predict: success, interrupted (fit stopped by
///                               SIGINT/SIGTERM) or failed (an exception leaves the Trainer, and then propagates).
/// @endcode
/// A logger stays usable after finalize: fit followed by test logs more rows and finalizes again.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace volt {

/// How the run a logger is finalized for ended.
enum class RunStatus { success, failed, interrupted };
/// "success", "failed", "interrupted" (the upstream strings).
const char* to_string(RunStatus status);

class Logger {
 public:
  virtual ~Logger() = default;
  /// The experiment name ("lightning_logs" by default) and its version number.
  virtual std::string name() const = 0;
  virtual int version() const = 0;
  /// Where this logger writes (`<root>/<name>/version_N`). Checkpoints go under the Trainer's first logger's.
  virtual std::string log_dir() const = 0;
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  /// `hparams` is a JSON object (TrainModule::hparams()); may be empty.
  virtual void log_hyperparams(const nlohmann::json& hparams) = 0;
  /// Makes everything logged so far durable enough for a reader (another process, a later run).
  virtual void save() {}
  virtual void finalize(RunStatus status) { save(); }
};

/// `<root>/<name>/version_N`, the directory scheme CSVLogger and TensorBoardLogger share. With version = -1, N is
/// found on first use (one more than the largest existing version_N directory, 0 when there is none) and then
/// kept; the directory itself is created only by create(), so resolving the version writes nothing. `owner`
/// ("CSVLogger") names the logger in errors.
class VersionedLogDir {
 public:
  VersionedLogDir(std::string root_dir, std::string name, int version, std::string owner);
  const std::string& name() const { return name_; }
  int version() const;
  const std::string& path() const;
  /// Creates the directory (once) and returns it; a volt::Error naming the owner, the path and the reason when
  /// it cannot be created or written.
  const std::string& create();

 private:
  void resolve() const;
  std::string root_, name_, owner_;
  mutable int version_;
  mutable std::string path_;
  bool created_ = false;
};

/// hparams.yaml in `dir`: a flat YAML rendering of a JSON object (nested objects indented), written atomically.
void write_hparams_yaml(const std::string& dir, const nlohmann::json& hparams);

}  // namespace volt
