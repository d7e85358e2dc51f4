#include "runtime/trace.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/cuda_api.h"
#include "runtime/error.h"
#include "volt/config.h"

#if VOLT_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace volt::trace {
namespace detail {
std::atomic<uint32_t> g_flags{0};
}  // namespace detail

namespace {

constexpr uint32_t kNvtxBit = 1, kRecorderBit = 2;
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

void set_recorder(Recorder* r) {
  g_recorder.store(r, std::memory_order_release);
  if (r) detail::g_flags.fetch_or(kRecorderBit, std::memory_order_relaxed);
  else detail::g_flags.fetch_and(~kRecorderBit, std::memory_order_relaxed);
}
Recorder* recorder() { return g_recorder.load(std::memory_order_acquire); }

void Range::begin(Layer layer, std::string_view name, const RangeInfo& info) {
  layer_ = layer;
#if VOLT_WITH_CUDA
  if (nvtx_attached()) {
    const std::string n(name);
    const nvtxEventAttributes_t a = attributes(layer, n, info.bytes);
    nvtxDomainRangePushEx(domain(layer), &a);
    nvtx_ = true;
  }
#endif
  recorder_ = recorder();
  if (recorder_) recorder_->begin(layer, name, info);
}

void Range::end() {
  if (recorder_) recorder_->end(layer_);
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
  if (Recorder* r = recorder()) r->mark(layer, name);
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
bool profiler_call(bool start) {
  mark(Layer::trainer, start ? "cudaProfilerStart" : "cudaProfilerStop");
#if VOLT_WITH_CUDA
  if (!cuda_available()) return false;
  for (int i = 0; i < cuda_device_count(); ++i) {
    DeviceScope scope(Device(DeviceType::CUDA, i));
    const cudaError_t e = start ? cudaProfilerStart() : cudaProfilerStop();
    VOLT_CHECK(e == cudaSuccess, start ? "cudaProfilerStart" : "cudaProfilerStop", " failed on cuda:", i, ": ",
               cudaGetErrorString(e));
  }
  return true;
#else
  return false;
#endif
}
}  // namespace

bool cuda_profiler_start() { return profiler_call(true); }
bool cuda_profiler_stop() { return profiler_call(false); }

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
  }
  return *this;
}

void GpuTimer::start(Device device) {
#if VOLT_WITH_CUDA
  if (!device.is_cuda() || !cuda_available()) return;
  DeviceScope scope(device);
  cudaEvent_t ev = nullptr;
  if (!start_) {
    if (cudaEventCreate(&ev) != cudaSuccess) return;
    start_ = ev;
  }
  device_ = device.index;
  cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(get_stream(device).handle));
#else
  (void)device;
#endif
}

void GpuTimer::stop() {
#if VOLT_WITH_CUDA
  if (!start_) return;
  const Device device(DeviceType::CUDA, device_);
  DeviceScope scope(device);
  if (!stop_) {
    cudaEvent_t ev = nullptr;
    if (cudaEventCreate(&ev) != cudaSuccess) return;
    stop_ = ev;
  }
  cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(get_stream(device).handle));
#endif
}

double GpuTimer::elapsed_ms() const {
#if VOLT_WITH_CUDA
  if (!valid()) return -1;
  DeviceScope scope(Device(DeviceType::CUDA, device_));
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)) != cudaSuccess) return -1;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)) != cudaSuccess)
    return -1;
  return ms;
#else
  return -1;
#endif
}

double GpuTimer::since_ms(const GpuTimer& origin) const {
#if VOLT_WITH_CUDA
  if (!start_ || !origin.start_ || origin.device_ != device_) return -1;
  DeviceScope scope(Device(DeviceType::CUDA, device_));
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
