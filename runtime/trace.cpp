#include <volt/runtime/trace.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_internal.h>
#include <volt/runtime/error.h>
#include <volt/runtime/log.h>
#include <volt/config.h>

#if VOLT_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace volt::trace {
namespace detail {
std::atomic<uint32_t> g_flags{0};

struct RecorderSlot {
  std::shared_mutex mu;     // shared while a call is in progress; exclusive to detach
  Recorder* recorder;       // nullptr once detached
  explicit RecorderSlot(Recorder* r) : recorder(r) {}
};
}  // namespace detail

namespace {

using detail::kNvtxBit;
using detail::RecorderSlot;
constexpr uint32_t kLayerBits = static_cast<uint32_t>(kAllLayers) << 8;
std::mutex g_slot_mu;                  // guards g_slot (swapped only when a recorder comes or goes)
std::shared_ptr<RecorderSlot> g_slot;  // the installed recorder's slot
std::atomic<Recorder*> g_recorder{nullptr};
std::atomic<uint64_t> g_flops{0};
thread_local std::vector<std::string> t_modules;

constexpr const char* kLayerNames[kNumLayers] = {"trainer", "data", "module", "op", "backward", "kernel", "optim", "comm"};
constexpr const char* kLayerDomains[kNumLayers] = {"volt.trainer", "volt.data",     "volt.nn",     "volt.ops",
                                                   "volt.autograd", "volt.kernels", "volt.optim", "volt.distributed"};

#if VOLT_WITH_CUDA
// One colour per layer (ARGB), so a timeline reads at a glance.
constexpr uint32_t kLayerColors[kNumLayers] = {0xFF4C72B0, 0xFF55A868, 0xFFDD8452, 0xFF8172B3,
                                               0xFFC44E52, 0xFF8C8C8C, 0xFFCCB974, 0xFF64B5CD};

bool nvtx_tool_present() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  return path != nullptr && *path != '\0';
}

nvtxDomainHandle_t domain(Layer layer) {
  static nvtxDomainHandle_t domains[kNumLayers];
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < kNumLayers; ++i) domains[i] = nvtxDomainCreateA(kLayerDomains[i]);
  });
  return domains[static_cast<int>(layer)];
}

nvtxEventAttributes_t attributes(Layer layer, const std::string& name, uint64_t bytes) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = kLayerColors[static_cast<int>(layer)];
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  if (bytes) {
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = bytes;
  }
  return a;
}
#else
bool nvtx_tool_present() { return false; }
#endif

// Reads the NVTX tool environment once at start-up.
const bool g_nvtx_init = [] {
  if (nvtx_tool_present()) detail::g_flags.fetch_or(kNvtxBit, std::memory_order_relaxed);
  return true;
}();

}  // namespace

const char* layer_name(Layer layer) { return kLayerNames[static_cast<int>(layer)]; }
const char* layer_domain(Layer layer) { return kLayerDomains[static_cast<int>(layer)]; }

bool nvtx_attached() { return (detail::g_flags.load(std::memory_order_relaxed) & kNvtxBit) != 0; }

namespace {
void set_layer_bits(uint32_t layers) {
  uint32_t cur = detail::g_flags.load(std::memory_order_relaxed);
  while (!detail::g_flags.compare_exchange_weak(cur, (cur & ~kLayerBits) | ((layers & kAllLayers) << 8),
                                                std::memory_order_relaxed)) {
  }
}
std::shared_ptr<RecorderSlot> current_slot() {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  return g_slot;
}
}  // namespace

void set_recorder(Recorder* r, uint32_t layers) {
  std::shared_ptr<RecorderSlot> old;
  {
    std::lock_guard<std::mutex> lock(g_slot_mu);
    old = std::move(g_slot);
    g_slot = r ? std::make_shared<RecorderSlot>(r) : nullptr;
    g_recorder.store(r, std::memory_order_release);
    set_layer_bits(r ? layers : 0);
  }
  if (old) {
    // Wait for calls in progress on other threads; ranges that end later find the slot empty.
    std::unique_lock<std::shared_mutex> detach(old->mu);
    old->recorder = nullptr;
  }
}

void set_recorder_layers(const Recorder* r, uint32_t layers) {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  if (g_slot && g_slot->recorder == r) set_layer_bits(layers);
}

Recorder* recorder() { return g_recorder.load(std::memory_order_acquire); }

void Range::begin(Layer layer, std::string_view name, const RangeInfo& info) noexcept {
  layer_ = layer;
  try {
#if VOLT_WITH_CUDA
    if (nvtx_attached()) {
      const std::string n(name);
      const nvtxEventAttributes_t a = attributes(layer, n, info.bytes);
      nvtxDomainRangePushEx(domain(layer), &a);
      nvtx_ = true;
    }
#endif
    if ((detail::g_flags.load(std::memory_order_relaxed) & detail::layer_bit(layer)) == 0) return;
    std::shared_ptr<RecorderSlot> slot = current_slot();
    if (!slot) return;
    std::shared_lock<std::shared_mutex> lock(slot->mu);
    if (!slot->recorder) return;
    slot->recorder->begin(layer, name, info);
    slot_ = std::move(slot);  // only a begun range is ended on the recorder
  } catch (...) {
    // A recorder that failed (out of memory) misses this range; the NVTX range stays balanced.
  }
}

void Range::end() noexcept {
  if (slot_) {
    try {
      std::shared_lock<std::shared_mutex> lock(slot_->mu);
      if (slot_->recorder) slot_->recorder->end(layer_);
    } catch (...) {
    }
    slot_.reset();
  }
#if VOLT_WITH_CUDA
  if (nvtx_) nvtxDomainRangePop(domain(layer_));
#endif
}

void mark(Layer layer, std::string_view name) {
#if VOLT_WITH_CUDA
  if (nvtx_attached()) {
    const std::string n(name);
    const nvtxEventAttributes_t a = attributes(layer, n, 0);
    nvtxDomainMarkEx(domain(layer), &a);
  }
#endif
  if (std::shared_ptr<RecorderSlot> slot = current_slot()) {
    std::shared_lock<std::shared_mutex> lock(slot->mu);
    if (slot->recorder) slot->recorder->mark(layer, name);
  }
}

const std::string& current_module() {
  static const std::string none;
  return t_modules.empty() ? none : t_modules.back();
}

void ModuleRange::begin(std::string name) {
  range_ = std::make_unique<Range>(Layer::module, std::string_view(name));
  t_modules.push_back(std::move(name));
}

void ModuleRange::end() {
  range_.reset();
  if (!t_modules.empty()) t_modules.pop_back();
}

void count_flops(uint64_t flops) { g_flops.fetch_add(flops, std::memory_order_relaxed); }
uint64_t flops_counted() { return g_flops.load(std::memory_order_relaxed); }

namespace {
bool profiler_call(bool start, Device device) {
  const char* what = start ? "cudaProfilerStart" : "cudaProfilerStop";
  mark(Layer::trainer, what);
#if VOLT_WITH_CUDA
  if (!device.is_cuda() || !cuda_available() || device.index >= cuda_device_count()) return false;
  try {
    DeviceScope scope(device);
    const cudaError_t e = start ? cudaProfilerStart() : cudaProfilerStop();
    if (e == cudaSuccess) return true;
    logging::warn(
        fmt::format("{} failed on {}: {} (profiling window ignored)", what, device.str(), cudaGetErrorString(e)));
  } catch (const std::exception& e) {
    logging::warn(fmt::format("{} on {}: {} (profiling window ignored)", what, device.str(), e.what()));
  }
  return false;
#else
  (void)device;
  return false;
#endif
}
}  // namespace

bool cuda_profiler_start(Device device) { return profiler_call(true, device); }
bool cuda_profiler_stop(Device device) { return profiler_call(false, device); }

// ---- GpuTimer ---------------------------------------------------------------------------------------------------
GpuTimer::~GpuTimer() {
#if VOLT_WITH_CUDA
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
#endif
}

GpuTimer& GpuTimer::operator=(GpuTimer&& o) noexcept {
  if (this != &o) {
    std::swap(start_, o.start_);
    std::swap(stop_, o.stop_);
    std::swap(device_, o.device_);
    std::swap(started_, o.started_);
    std::swap(stopped_, o.stopped_);
  }
  return *this;
}

#if VOLT_WITH_CUDA
namespace {
// Records `*ev` (created on first use, on the current device) on the device's compute stream.
bool record(void*& ev, Device device) noexcept {
  try {
    DeviceScope scope(device);
    if (!ev) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return false;
      ev = e;
    }
    return cudaEventRecord(static_cast<cudaEvent_t>(ev), static_cast<cudaStream_t>(get_stream(device).handle)) ==
           cudaSuccess;
  } catch (...) {
    return false;
  }
}
}  // namespace
#endif

void GpuTimer::start(Device device) noexcept {
  started_ = stopped_ = false;
#if VOLT_WITH_CUDA
  if (!device.is_cuda() || !cuda_available()) return;
  // An event recorded in a CUDA graph capture times nothing, and querying it would break the capture.
  if (volt::detail::compute_stream_capturing(device.index)) return;
  if (device_ != device.index && start_) {
    // Events belong to the device they were created on: start over on another one.
    GpuTimer fresh;
    *this = std::move(fresh);
  }
  device_ = device.index;
  started_ = record(start_, device);
#else
  (void)device;
#endif
}

void GpuTimer::stop() noexcept {
#if VOLT_WITH_CUDA
  if (!started_ || volt::detail::compute_stream_capturing(device_)) return;
  stopped_ = record(stop_, Device(DeviceType::CUDA, device_));
#endif
}

bool GpuTimer::done() const noexcept {
#if VOLT_WITH_CUDA
  if (!valid()) return true;
  try {
    return ::volt::detail::event_done(stop_);
  } catch (...) {
    return true;  // a failed timer reads as done (its elapsed time is then invalid)
  }
#else
  return true;
#endif
}

double GpuTimer::elapsed_ms() const noexcept {
#if VOLT_WITH_CUDA
  if (!valid()) return -1;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)) != cudaSuccess) return -1;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)) != cudaSuccess)
    return -1;
  return ms;
#else
  return -1;
#endif
}

double GpuTimer::since_ms(const GpuTimer& origin) const noexcept {
#if VOLT_WITH_CUDA
  if (!started_ || !origin.started_ || origin.device_ != device_) return -1;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(start_)) != cudaSuccess) return -1;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(origin.start_), static_cast<cudaEvent_t>(start_)) !=
      cudaSuccess)
    return -1;
  return ms;
#else
  (void)origin;
  return -1;
#endif
}

bool GpuTimer::synchronize(Device device) noexcept {
#if VOLT_WITH_CUDA
  if (!device.is_cuda() || !cuda_available() || volt::detail::compute_stream_capturing(device.index)) return false;
  try {
    DeviceScope scope(device);
    return cudaStreamSynchronize(static_cast<cudaStream_t>(get_stream(device).handle)) == cudaSuccess;
  } catch (...) {
    return false;
  }
#else
  (void)device;
  return false;
#endif
}

std::string device_name(Device device) {
#if VOLT_WITH_CUDA
  if (!device.is_cuda() || !cuda_available() || device.index >= cuda_device_count()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index) != cudaSuccess) return "";
  return prop.name;
#else
  (void)device;
  return "";
#endif
}

}  // namespace volt::trace
