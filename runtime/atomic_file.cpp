#include <volt/runtime/atomic_file.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <volt/runtime/error.h>

namespace volt {

namespace {

std::atomic<AtomicWriteHook> g_hook{nullptr};

std::string errno_str() { return std::strerror(errno); }

void run_hook(const std::string& path) {
  if (AtomicWriteHook h = g_hook.load()) h(path);
}

}  // namespace

void set_atomic_write_hook(AtomicWriteHook hook) { g_hook.store(hook); }

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    VOLT_CHECK(w > 0, what, " failed: ", w == 0 ? std::string("no progress") : errno_str());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void atomic_write_file(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  VOLT_CHECK(!base.empty(), "atomic_write_file: path '", path, "' names a directory, expected a file");
  const std::string tmp = (slash == std::string::npos ? std::string() : dir + "/") + "." + base + ".tmp." +
                          std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  VOLT_CHECK(fd >= 0, "atomic_write_file: cannot create temporary file '", tmp, "': ", errno_str());
  try {
    ByteSink sink = [&](const void* data, size_t n) {
      write_all(fd, data, n, "atomic_write_file: writing '" + tmp + "'");
      run_hook(path);
    };
    produce(sink);
    VOLT_CHECK(::fsync(fd) == 0, "atomic_write_file: fsync of '", tmp, "' failed: ", errno_str());
    int rc = ::close(fd);
    fd = -1;
    VOLT_CHECK(rc == 0, "atomic_write_file: closing '", tmp, "' failed: ", errno_str());
    run_hook(path);
    VOLT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "atomic_write_file: renaming '", tmp, "' to '", path,
               "' failed: ", errno_str());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; failure here leaves a complete file, so it is not an error.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void atomic_write_file(const std::string& path, const std::string& bytes) {
  atomic_write_file(path, [&](const ByteSink& write) { write(bytes.data(), bytes.size()); });
}

}  // namespace volt
