#pragma once
/// @file
/// Crash-safe file replacement: the one helper every writer of outputs uses (checkpoints, trainer-state JSON,
/// metrics.csv when its header changes, hparams.yaml, results.json). TensorBoard event files and new metrics.csv
/// rows are the exception: they are appended to (write_all below), and their readers skip a torn last record.
///
/// The bytes go to a temporary file `".<name>.tmp.<pid>.<n>"` in the destination's directory, which is fsync'ed,
/// renamed over the destination, and the directory is fsync'ed. A reader (or a process started after a crash
/// or SIGKILL at any instant) sees either the old file or the complete new one, never a torn one. A killed
/// writer may leave its temporary file behind; such names start with '.' and never end in the destination's
/// extension, so no reader picks them up.
#include <cstddef>
#include <functional>
#include <string>

namespace volt {

/// Writes `bytes` to `path` atomically. The parent directory must exist. Throws volt::Error naming the path
/// and the failing system call.
void atomic_write_file(const std::string& path, const std::string& bytes);

/// Streaming form: `produce` calls `write(data, n)` as often as it likes. If `produce` (or a write) throws, the
/// temporary file is removed, `path` is untouched, and the exception propagates.
using ByteSink = std::function<void(const void* data, size_t n)>;
void atomic_write_file(const std::string& path, const std::function<void(const ByteSink& write)>& produce);

/// Writes all n bytes to the file descriptor `fd` (retrying short writes and EINTR). Throws volt::Error
/// `"<what> failed: <reason>"` otherwise; `what` names the file (`"TensorBoardLogger: writing '<path>'"`).
void write_all(int fd, const void* data, size_t n, const std::string& what);

/// Test hook: called (with the destination path) after each chunk reaches the temporary file and once more
/// just before the rename. Crash tests install one that sleeps, to widen the windows in which a SIGKILL lands
/// inside a write. nullptr (the default) removes it. Not thread-safe against concurrent writes.
using AtomicWriteHook = void (*)(const std::string& path);
void set_atomic_write_hook(AtomicWriteHook hook);

}  // namespace volt
