#pragma once
/// @file
/// TensorBoardLogger: TensorBoard event files in `<root>/<name>/version_N/` (the CSVLogger's versioning, see
/// VersionedLogDir in trainer/loggers/logger.h), readable by `tensorboard --logdir <root>`.
///
/// Files are named `events.out.tfevents.<unix seconds>.<host>.<pid>.<n>` and hold TFRecord-framed Event messages
/// (the format: trainer/loggers/tfevents.h). Each log_metrics call is one Event at `step` with a scalar per metric
/// ("epoch" included), so TensorBoard's SCALARS tab shows every logged name; values are stored as float, as the
/// Summary proto's simple_value is. log_hyperparams writes hparams.yaml and the hparams plugin's
/// session_start_info summary (the HPARAMS tab; TensorBoard infers the metrics from the scalar tags).
///
/// Events are queued in memory and appended to the file every `max_queue` events, after `flush_secs` seconds,
/// and on save(); finalize() also fsyncs and closes the file, and a later event starts a new file in the same
/// directory (TensorBoard reads them all). The file is appended to, not replaced: a crash can leave a torn last
/// record, which TensorBoard's reader ignores, and loses at most the queued events.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <volt/trainer/loggers/logger.h>

namespace volt {

struct TensorBoardLoggerOptions {
  std::string name = "lightning_logs";  ///< the experiment folder under the root directory
  int version = -1;                     ///< -1: the next free version_N
  int64_t max_queue = 10;               ///< >= 1: events kept in memory before they are written
  double flush_secs = 120;              ///< >= 0: write the queue when an event arrives this long after the last write
};

class TensorBoardLogger : public Logger {
 public:
  explicit TensorBoardLogger(std::string root_dir, TensorBoardLoggerOptions options = {});
  /// Writes the queued events and closes the file; errors are reported on stderr (destructors never throw).
  ~TensorBoardLogger() override;
  TensorBoardLogger(const TensorBoardLogger&) = delete;
  TensorBoardLogger& operator=(const TensorBoardLogger&) = delete;

  std::string name() const override { return dir_.name(); }
  int version() const override { return dir_.version(); }
  std::string log_dir() const override { return dir_.path(); }

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const nlohmann::json& hparams) override;
  /// Appends the queued events to the file.
  void save() override;
  /// save(), then fsync and close the file.
  void finalize(RunStatus status) override;
  /// The event file written to now; "" before the first event and after finalize.
  const std::string& event_file() const { return path_; }

 private:
  void open_file();                        ///< a new event file, starting with the file-version record
  void append(const std::string& event);   ///< queues one Event (the file is open)
  void close_file(bool sync);

  VersionedLogDir dir_;
  TensorBoardLoggerOptions opt_;
  int fd_ = -1;
  std::string path_;
  std::string queue_;  ///< framed records not written yet
  int64_t queued_ = 0;
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace volt
