#include <volt/trainer/loggers/tensorboard_logger.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <volt/runtime/atomic_file.h>
#include <volt/runtime/error.h>
#include <volt/runtime/log.h>
#include <volt/trainer/loggers/tfevents.h>

namespace volt {

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

TensorBoardLogger::TensorBoardLogger(std::string root_dir, TensorBoardLoggerOptions options)
    : dir_(std::move(root_dir), options.name, options.version, "TensorBoardLogger"), opt_(std::move(options)) {
  VOLT_CHECK(opt_.max_queue >= 1, "TensorBoardLogger: max_queue=", opt_.max_queue, " must be >= 1");
  VOLT_CHECK(opt_.flush_secs >= 0, "TensorBoardLogger: flush_secs=", opt_.flush_secs, " must be >= 0");
}

TensorBoardLogger::~TensorBoardLogger() {
  try {
    save();
    close_file(/*sync=*/false);
  } catch (const std::exception& e) {
    logging::error(std::string(e.what()) + " (while closing " + dir_.path() + ")");
  }
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardLogger::open_file() {
  if (fd_ >= 0) return;
  // A unique name per file: two loggers of one process, or a file started after finalize, never collide.
  static std::atomic<uint64_t> counter{0};
  const double now = wall_time();
  const std::string file = "events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name() +
                           "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const std::string path = (std::filesystem::path(dir_.create()) / file).string();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  VOLT_CHECK(fd_ >= 0, "TensorBoardLogger: cannot create the event file '", path, "': ", std::strerror(errno));
  path_ = path;
  queue_ = tfrecord(file_version_event(now)) + queue_;  // the queue is empty unless a write failed
  last_write_ = std::chrono::steady_clock::now();
}

void TensorBoardLogger::append(const std::string& event) {
  queue_ += tfrecord(event);
  ++queued_;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count();
  if (queued_ >= opt_.max_queue || since >= opt_.flush_secs) save();
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  if (metrics.empty()) return;
  open_file();
  append(scalars_event(wall_time(), step, metrics));
}

void TensorBoardLogger::log_hyperparams(const nlohmann::json& hparams) {
  write_hparams_yaml(dir_.create(), hparams);
  if (!hparams.is_object() || hparams.empty()) return;
  open_file();
  const double now = wall_time();
  append(hparams_event(now, hparams, now));
  save();
}

void TensorBoardLogger::save() {
  if (fd_ < 0 || queue_.empty()) return;
  write_all(fd_, queue_.data(), queue_.size(), "TensorBoardLogger: writing '" + path_ + "'");
  queue_.clear();
  queued_ = 0;
  last_write_ = std::chrono::steady_clock::now();
}

void TensorBoardLogger::close_file(bool sync) {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  const std::string path = std::move(path_);
  path_.clear();
  const bool synced = !sync || ::fsync(fd) == 0;
  const int sync_errno = errno;
  const int rc = ::close(fd);
  VOLT_CHECK(synced, "TensorBoardLogger: fsync of '", path, "' failed: ", std::strerror(sync_errno));
  VOLT_CHECK(rc == 0, "TensorBoardLogger: closing '", path, "' failed: ", std::strerror(errno));
}

void TensorBoardLogger::finalize(RunStatus) {
  save();
  close_file(/*sync=*/true);
}

}  // namespace volt
