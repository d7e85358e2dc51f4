#pragma once
/// @file
/// Run-time view of CUDA. A binary built with the CUDA backend still runs where there is no driver or no GPU:
/// cuda_available() is then false, everything runs on the CPU, and asking for a GPU fails with a clear error.
#include <cstddef>
#include <memory>
#include <string>

#include <volt/runtime/device.h>

namespace volt {

struct Storage;

bool cuda_built();            ///< the CUDA backend was compiled in
bool cuda_available();        ///< built, a driver is present and at least one device is visible
int cuda_device_count();      ///< 0 when unavailable
std::string cuda_status();    ///< why CUDA is (un)available, for messages and logs
/// Compute capability of GPU `index` as major*10 + minor (e.g. 90 for an H100); the GPU must be usable.
int cuda_compute_capability(int index);
/// Number of streaming multiprocessors of GPU `index` (132 on an H100 SXM); the GPU must be usable.
int cuda_multiprocessor_count(int index);
/// Throws volt::Error naming `what` unless `device` is the CPU or an existing, usable GPU.
void check_device_usable(Device device, const char* what);

/// An opaque CUDA stream (nullptr = the legacy default stream) bound to a device.
struct Stream {
  Device device = kCPU;
  void* handle = nullptr;
};
/// Per device, Volt uses three streams: compute (kernels), comm (collectives), copy (loader uploads).
enum class StreamKind { Compute, Comm, Copy };
Stream get_stream(Device device, StreamKind kind = StreamKind::Compute);
void synchronize(Device device);          ///< wait for all work on the device
void synchronize(const Stream& stream);

/// An event recorded on one stream and waited for by another (no host synchronisation).
class Event {
 public:
  Event() = default;
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  ///< make `stream` wait for the recorded work
  void synchronize() const;               ///< host waits
  bool query() const;                     ///< true when the recorded work is done (or nothing recorded)
 private:
  void* handle_ = nullptr;
  Device device_ = kCPU;
};

/// RAII: makes `device`'s GPU the current one for a scope (kernel launches must target the current device's
/// streams). A no-op for the CPU and in builds without CUDA.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = -1;
  int index_ = -1;
};

/// Keeps `storage` alive until the work queued so far on `stream` has finished: an asynchronous copy that reads
/// a host buffer must not see it freed and reused (a pinned pool) before the copy ran. No-op on the CPU.
void keep_alive_until_done(std::shared_ptr<Storage> storage, const Stream& stream);

/// Byte copies between any two devices (host<->device, device<->device); synchronous w.r.t. the host unless
/// `stream` is given, in which case the copy is enqueued on it.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                const Stream* stream = nullptr);
void memset_zero(void* dst, Device device, size_t nbytes);

}  // namespace volt
