#include <volt/runtime/cuda_api.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <cstring>
#include <mutex>
#include <vector>

#include <volt/runtime/cuda_internal.h>
#include <volt/runtime/index_check.h>
#include <volt/runtime/storage.h>
#include <volt/runtime/error.h>
#include <volt/config.h>

#if VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <volt/runtime/cuda_check.h>
#endif

namespace volt {

bool cuda_built() { return VOLT_WITH_CUDA != 0; }

#if VOLT_WITH_CUDA

namespace {

struct CudaState {
  int count = 0;
  std::string status;
};

const CudaState& state() {
  static const CudaState s = [] {
    CudaState st;
    if (const char* v = std::getenv("VOLT_DISABLE_CUDA"); v && std::strcmp(v, "0") != 0) {
      st.status = "CUDA disabled by VOLT_DISABLE_CUDA";
      return st;
    }
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls are not confused
      st.status = std::string("CUDA unavailable: ") + cudaGetErrorString(err);
    } else if (n == 0) {
      st.status = "CUDA unavailable: no CUDA device is visible";
    } else {
      st.count = n;
      st.status = "CUDA available: " + std::to_string(n) + " device(s)";
    }
    return st;
  }();
  return s;
}

struct DeviceStreams {
  std::once_flag once;
  cudaStream_t compute = nullptr, comm = nullptr, copy = nullptr;
};

DeviceStreams& streams_for(int device) {
  static std::vector<DeviceStreams> all(64);
  VOLT_ASSERT(device >= 0 && device < 64, "device index out of range");
  auto& ds = all[device];
  std::call_once(ds.once, [&] {
    int prev = 0;
    VOLT_CUDA_CHECK(cudaGetDevice(&prev));
    VOLT_CUDA_CHECK(cudaSetDevice(device));
    VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&ds.compute, cudaStreamNonBlocking));
    VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&ds.comm, cudaStreamNonBlocking));
    VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&ds.copy, cudaStreamNonBlocking));
    VOLT_CUDA_CHECK(cudaSetDevice(prev));
  });
  return ds;
}

CachingAllocator& device_allocator(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<CachingAllocator>> allocs(64);
  std::lock_guard<std::mutex> l(mu);
  auto& a = allocs.at(device);
  if (!a) {
    a = std::make_unique<CachingAllocator>(
        [device](size_t n) -> void* {
          DeviceScope g(cuda_device(device));
          void* p = nullptr;
          if (cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
          DeviceScope g(cuda_device(device));
          cudaFree(p);
        });
  }
  return *a;
}

// Whether `s` is capturing a CUDA graph (also when the capture was invalidated and not yet ended: the stream is
// still in capture mode).
bool capturing(cudaStream_t s) noexcept {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

std::atomic<int> open_captures{0};

// Waits for stream `s` of GPU `device`, then throws what its kernels' index checks recorded up to there
// (runtime/index_check.h: the record is copied back in the same queue, just before the wait).
void sync_reporting_index_checks(int device, cudaStream_t s) {
  detail::fetch_index_checks(device, s);
  VOLT_CUDA_CHECK(cudaStreamSynchronize(s));
  detail::raise_index_checks(device);
}

}  // namespace

bool cuda_available() { return state().count > 0; }
int cuda_device_count() { return state().count; }
std::string cuda_status() { return state().status; }

int cuda_compute_capability(int index) {
  check_device_usable(cuda_device(index), "cuda_compute_capability");
  int major = 0, minor = 0;
  VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  return major * 10 + minor;
}

int cuda_multiprocessor_count(int index) {
  check_device_usable(cuda_device(index), "cuda_multiprocessor_count");
  // Kernel launchers size their grids by it on every call: asked of the driver once per device.
  static std::array<std::atomic<int>, 64> cached{};
  if (index < 64)
    if (const int c = cached[static_cast<size_t>(index)].load(std::memory_order_relaxed); c > 0) return c;
  int count = 0;
  VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, index));
  if (index < 64) cached[static_cast<size_t>(index)].store(count, std::memory_order_relaxed);
  return count;
}

void check_device_usable(Device device, const char* what) {
  if (device.is_cpu()) return;
  VOLT_CHECK(cuda_available(), what, ": device ", device.str(), " was requested but ", cuda_status(),
             "; use the CPU (device 'cpu' or accelerator 'cpu'/'auto')");
  VOLT_CHECK(device.index >= 0 && device.index < cuda_device_count(), what, ": device ", device.str(),
             " does not exist; ", cuda_device_count(), " CUDA device(s) are visible");
}

Stream get_stream(Device device, StreamKind kind) {
  if (device.is_cpu()) return Stream{kCPU, nullptr};
  check_device_usable(device, "get_stream");
  auto& ds = streams_for(device.index);
  cudaStream_t s = kind == StreamKind::Compute ? ds.compute : kind == StreamKind::Comm ? ds.comm : ds.copy;
  return Stream{device, s};
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
  check_device_usable(device, "synchronize");
  VOLT_CHECK(!detail::compute_stream_capturing(device.index), "synchronize: the host cannot wait for ",
             device.str(), " while its compute stream is capturing a CUDA graph (a host synchronisation cannot be "
             "captured); move the synchronisation out of the captured step");
  DeviceScope g(device);
  // A kernel's failed index check (runtime/index_check.h): its record comes back with the compute stream's work.
  detail::fetch_index_checks(device.index, get_stream(device, StreamKind::Compute).handle);
  VOLT_CUDA_CHECK(cudaDeviceSynchronize());
  detail::raise_index_checks(device.index);
}

void synchronize(const Stream& stream) {
  if (stream.device.is_cpu()) return;
  VOLT_CHECK(!capturing(static_cast<cudaStream_t>(stream.handle)), "synchronize: the host cannot wait for a "
             "stream of ", stream.device.str(), " that is capturing a CUDA graph (a host synchronisation cannot be "
             "captured); move the synchronisation out of the captured step");
  VOLT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
}

Event::~Event() {
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void Event::record(const Stream& stream) {
  if (stream.device.is_cpu()) return;
  VOLT_CHECK(!handle_ || device_ == stream.device, "Event::record: this event belongs to ", device_.str(),
             " and cannot be recorded on a stream of ", stream.device.str(), "; use one event per device");
  DeviceScope g(stream.device);
  if (!handle_) {
    cudaEvent_t e;
    VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    handle_ = e;
    device_ = stream.device;
  }
  VOLT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle)));
}

void Event::wait(const Stream& stream) const {
  if (!handle_ || stream.device.is_cpu()) return;
  VOLT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle),
                                      static_cast<cudaEvent_t>(handle_), 0));
}

void Event::synchronize() const {
  if (handle_) VOLT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
}

bool Event::query() const { return !handle_ || detail::event_done(handle_); }

DeviceScope::DeviceScope(Device device) {
  if (!device.is_cuda()) return;
  VOLT_CUDA_CHECK(cudaGetDevice(&prev_));
  index_ = device.index;
  if (prev_ != index_) VOLT_CUDA_CHECK(cudaSetDevice(index_));
}

DeviceScope::~DeviceScope() {
  if (index_ >= 0 && prev_ != index_) cudaSetDevice(prev_);
}

void keep_alive_until_done(std::shared_ptr<Storage> storage, const Stream& stream) {
  if (!stream.device.is_cuda() || !storage) return;
  if (capturing(static_cast<cudaStream_t>(stream.handle))) {
    // The copy was captured into a graph that reads `storage` at every replay (and an event recorded in a
    // capture cannot be queried): keep it until the graph's pool is released.
    detail::keep_alive_for_capture(stream.device.index, std::move(storage));
    return;
  }
  struct Pending {
    std::unique_ptr<Event> done;
    std::shared_ptr<Storage> storage;
  };
  static std::mutex mu;
  static std::deque<Pending> pending;
  auto ev = std::make_unique<Event>();
  ev->record(stream);
  std::lock_guard<std::mutex> l(mu);
  // Release what has completed (in order of recording, which is close enough to completion order).
  while (!pending.empty() && pending.front().done->query()) pending.pop_front();
  pending.push_back({std::move(ev), std::move(storage)});
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                const Stream* stream) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  check_device_usable(dst_device, "copy_bytes");
  check_device_usable(src_device, "copy_bytes");
  Device dev = dst_device.is_cuda() ? dst_device : src_device;
  DeviceScope g(dev);
  cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  if (src_device.is_cuda() && dst_device.is_cuda() && src_device.index != dst_device.index) {
    // Peer copy: the work producing `src` runs on the source GPU's compute stream, which the destination's
    // streams do not wait for; finish it first (and report the source's failed index checks, as a copy to the
    // host would: a replica's results may only ever leave it this way).
    const auto src_stream = static_cast<cudaStream_t>(get_stream(src_device, StreamKind::Compute).handle);
    VOLT_CHECK(!capturing(src_stream), "copy_bytes: a copy from ", src_device.str(), " to ", dst_device.str(),
               " waits for the compute stream of ", src_device.str(), ", which is capturing a CUDA graph; move the "
               "copy out of the captured step");
    sync_reporting_index_checks(src_device.index, src_stream);
  }
  if (stream) {
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, static_cast<cudaStream_t>(stream->handle)));
  } else {
    // Ordered after the compute stream's work on that device, and complete on return.
    cudaStream_t s = static_cast<cudaStream_t>(get_stream(dev, StreamKind::Compute).handle);
    VOLT_CHECK(!capturing(s), "copy_bytes: a synchronous copy (e.g. Tensor::to(cpu) or item()) cannot run while the "
               "compute stream of ", dev.str(), " is capturing a CUDA graph; move it out of the captured step");
    VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, s));
    // What the host reads may come from a kernel that dropped a bad index: say so now.
    if (dst_device.is_cpu())
      sync_reporting_index_checks(dev.index, s);
    else
      VOLT_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

void memset_zero(void* dst, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, 0, nbytes);
    return;
  }
  check_device_usable(device, "memset_zero");
  DeviceScope g(device);
  VOLT_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes,
                                  static_cast<cudaStream_t>(get_stream(device, StreamKind::Compute).handle)));
}

namespace detail {

std::shared_ptr<void> cuda_allocate(int device, size_t nbytes) {
  auto& alloc = device_allocator(device);
  void* p = alloc.allocate(nbytes);
  return std::shared_ptr<void>(p, [&alloc](void* q) { alloc.free(q); });
}

// The side pool's contract (allocator.h, allocate_for_writer): the writer waits for the recycled block's last
// reader; the deleter fences the compute work queued when the tensor died, which holds every kernel that reads
// it (nothing can queue a read of a dead tensor afterwards).
std::shared_ptr<void> cuda_allocate_for_writer(int device, size_t nbytes, const Stream& writer) {
  auto& alloc = device_allocator(device);
  CachingAllocator::SideBlock b = alloc.allocate_side(nbytes);
  if (b.wait_for) static_cast<const Event*>(b.wait_for.get())->wait(writer);
  return std::shared_ptr<void>(b.ptr, [&alloc, device](void* q) {
    if (q == nullptr) return;
    std::shared_ptr<Event> reader;
    try {
      // During a capture the block joins the capture's private pool, reused only in the captured stream's
      // order; an event recorded there could not be waited for outside the capture anyway.
      if (!compute_stream_capturing(device)) {
        reader = std::make_shared<Event>();
        reader->record(get_stream(cuda_device(device), StreamKind::Compute));
      }
    } catch (...) {
      return;  // no fence (the runtime is shutting down): never reuse the block rather than risk a race
    }
    alloc.free_side(q, std::move(reader));
  });
}
MemoryStats cuda_memory_stats(int device) { return device_allocator(device).stats(); }
void cuda_reset_peak(int device) { device_allocator(device).reset_peak(); }
void cuda_empty_cache(int device) { device_allocator(device).empty_cache(); }

CachingAllocator& cuda_device_allocator(int device) { return device_allocator(device); }

bool compute_stream_capturing(int device) noexcept {
  if (device < 0 || device >= cuda_device_count()) return false;
  try {
    return capturing(streams_for(device).compute);
  } catch (...) {
    return false;
  }
}

// Guards the open-capture count together with pinned_free's cudaFreeHost: a capture cannot begin while a free
// is under way, and no free starts while a capture is open.
std::mutex& pinned_mutex() {
  static auto* mu = new std::mutex;  // never destroyed: pinned blocks may be freed during exit
  return *mu;
}

bool event_done(void* event) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is no error: do not leave it for the next launch check
    return false;
  }
  VOLT_CUDA_CHECK(e);
  return true;
}

void note_capture(bool open) noexcept {
  std::lock_guard<std::mutex> l(pinned_mutex());
  open_captures.fetch_add(open ? 1 : -1);
}

void* pinned_alloc(size_t nbytes) {
  if (!cuda_available()) return nullptr;
  void* p = nullptr;
  if (cudaMallocHost(&p, std::max<size_t>(nbytes, 64)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}
// cudaFreeHost synchronises the device, which no capture allows: blocks freed while one is open wait for the
// next free outside a capture.
void pinned_free(void* p) {
  static auto* deferred = new std::vector<void*>;  // never destroyed, like the mutex
  std::lock_guard<std::mutex> l(pinned_mutex());
  if (open_captures.load() > 0) {
    deferred->push_back(p);
    return;
  }
  for (void* q : *deferred) cudaFreeHost(q);
  deferred->clear();
  cudaFreeHost(p);
}

}  // namespace detail

#else  // ---- built without CUDA ---------------------------------------------------------------------------

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_status() { return "CUDA unavailable: Volt was built without the CUDA backend (VOLT_CUDA=OFF)"; }
int cuda_compute_capability(int index) {
  check_device_usable(cuda_device(index), "cuda_compute_capability");
  return 0;
}
int cuda_multiprocessor_count(int index) {
  check_device_usable(cuda_device(index), "cuda_multiprocessor_count");
  return 0;
}

void check_device_usable(Device device, const char* what) {
  VOLT_CHECK(device.is_cpu(), what, ": device ", device.str(), " was requested but ", cuda_status(),
             "; use the CPU (device 'cpu' or accelerator 'cpu'/'auto')");
}

Stream get_stream(Device device, StreamKind) {
  check_device_usable(device, "get_stream");
  return Stream{kCPU, nullptr};
}
void synchronize(Device device) { check_device_usable(device, "synchronize"); }
void synchronize(const Stream&) {}
Event::~Event() = default;
void Event::record(const Stream&) {}
void Event::wait(const Stream&) const {}
void Event::synchronize() const {}
bool Event::query() const { return true; }

DeviceScope::DeviceScope(Device device) { check_device_usable(device, "DeviceScope"); }
DeviceScope::~DeviceScope() = default;
void keep_alive_until_done(std::shared_ptr<Storage>, const Stream&) {}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                const Stream*) {
  check_device_usable(dst_device, "copy_bytes");
  check_device_usable(src_device, "copy_bytes");
  if (nbytes) std::memcpy(dst, src, nbytes);
}

void memset_zero(void* dst, Device device, size_t nbytes) {
  check_device_usable(device, "memset_zero");
  if (nbytes) std::memset(dst, 0, nbytes);
}

namespace detail {
std::shared_ptr<void> cuda_allocate(int, size_t) { VOLT_FAIL("cuda_allocate: ", cuda_status()); }
std::shared_ptr<void> cuda_allocate_for_writer(int, size_t, const Stream&) {
  VOLT_FAIL("cuda_allocate_for_writer: ", cuda_status());
}
MemoryStats cuda_memory_stats(int) { return {}; }
void cuda_reset_peak(int) {}
void cuda_empty_cache(int) {}
void* pinned_alloc(size_t) { return nullptr; }
void pinned_free(void*) {}
bool compute_stream_capturing(int) noexcept { return false; }
void note_capture(bool) noexcept {}
}  // namespace detail

#endif

}  // namespace volt
