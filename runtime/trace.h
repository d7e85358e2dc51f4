#pragma once
// Named ranges on the timeline, for Nsight and for Volt's own profilers (trainer/profiler.h).
//
// A trace::Range marks a stretch of host time: a trainer hook or loop stage, a module's forward (by its dotted
// name) or backward, an op's forward, an autograd node's backward, a backend kernel launch, an optimizer step, a
// collective (with its bytes), a loader wait or a host-to-device upload. Each range goes to two places:
//  - NVTX (CUDA-enabled builds; compiled out of CPU-only ones): a push/pop range in its layer's domain
//    ("volt.trainer", "volt.ops", ...; one colour per layer), so Nsight Systems shows the ranges on the CPU
//    timeline and projects them onto the GPU kernels they launched, and Nsight Compute can filter kernels by
//    range (`ncu --nvtx --nvtx-include "volt.ops@linear/"`).
//  - the process's Recorder, when a profiler has installed one (host times, CUDA events for kernel launches).
// With no NVTX tool attached (nsys/ncu set NVTX_INJECTION64_PATH) and no recorder, a Range costs one relaxed
// atomic load: its name is not even built (the lambda form).
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/device.h"

namespace volt::trace {

// The layer a range belongs to: its NVTX domain and colour, and a column of the profilers' tables.
enum class Layer : uint8_t {
  trainer,   // hooks and loop stages ("[TrainModule]training_step", "run_training_batch", ...)
  data,      // loader waits and host-to-device uploads
  module,    // nn::Module forward ("encoder.l1 (Linear)") and its backward ("encoder.l1 (Linear).backward")
  op,        // public ops' forward ("linear", "conv2d", "add", ...)
  backward,  // autograd nodes ("LinearBackward", ...)
  kernel,    // backend launches ("gemm", "binary", "conv2d_forward", ...), timed with CUDA events on a GPU
  optim,     // optimizer steps, gradient clipping and unscaling
  comm,      // collectives (bytes in RangeInfo)
};
inline constexpr int kNumLayers = 8;
const char* layer_name(Layer layer);  // "trainer", "data", ...
// NVTX domain name of a layer ("volt.trainer", ...).
const char* layer_domain(Layer layer);

struct RangeInfo {
  Device device = kCPU;  // where the range's work runs (kernel and comm ranges)
  uint64_t bytes = 0;    // collectives and uploads: bytes moved
};

// Receives every range while installed (set_recorder). begin/end come in nested pairs per thread; a recorder
// must be thread-safe (loader workers run ops too). `name` is valid only during the call.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void begin(Layer layer, std::string_view name, const RangeInfo& info) = 0;
  virtual void end(Layer layer) = 0;
  // An instant event (e.g. "cudaProfilerStart").
  virtual void mark(Layer layer, std::string_view name) {}
};

namespace detail {
// Bit 0: an NVTX tool is attached; bit 1: a recorder is installed.
extern std::atomic<uint32_t> g_flags;
}  // namespace detail

// True when ranges go anywhere (an NVTX tool or a recorder).
inline bool active() { return detail::g_flags.load(std::memory_order_relaxed) != 0; }
// True in CUDA-enabled builds when an NVTX tool was attached at start-up.
bool nvtx_attached();
// Installs `r` (nullptr removes it). The caller keeps it alive until it is removed and no range it saw is open.
void set_recorder(Recorder* r);
Recorder* recorder();

class Range {
 public:
  Range(Layer layer, const char* name, const RangeInfo& info = {}) {
    if (active()) begin(layer, std::string_view(name), info);
  }
  Range(Layer layer, std::string_view name, const RangeInfo& info = {}) {
    if (active()) begin(layer, name, info);
  }
  // The name is built only when the range goes somewhere.
  template <class NameFn>
    requires std::invocable<NameFn&>
  Range(Layer layer, NameFn&& name, const RangeInfo& info = {}) {
    if (active()) begin(layer, std::string_view(std::string(name())), info);
  }
  ~Range() {
    if (nvtx_ || recorder_) end();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void begin(Layer layer, std::string_view name, const RangeInfo& info);
  void end();
  Recorder* recorder_ = nullptr;
  Layer layer_ = Layer::trainer;
  bool nvtx_ = false;
};

// An instant event in `layer` (NVTX mark and recorder mark).
void mark(Layer layer, std::string_view name);

// The innermost open module range on this thread ("" outside any, or when nothing is tracing). Autograd nodes
// remember it so that their backward can be attributed to the module (runtime/autograd.cpp).
const std::string& current_module();
// RAII: a module range that also names the module scope for current_module().
class ModuleRange {
 public:
  template <class NameFn>
    requires std::invocable<NameFn&>
  explicit ModuleRange(NameFn&& name) {
    if (active()) begin(std::string(name()));
  }
  ~ModuleRange() {
    if (range_) end();
  }
  ModuleRange(const ModuleRange&) = delete;
  ModuleRange& operator=(const ModuleRange&) = delete;

 private:
  void begin(std::string name);
  void end();
  std::unique_ptr<Range> range_;
};

// ---- FLOP counting -------------------------------------------------------------------------------------------
// GEMMs and convolutions add their multiply-add count x2 (forward and backward) to a process-wide counter that
// throughput monitors read. Always on: one relaxed atomic add per GEMM/convolution call.
void count_flops(uint64_t flops);
uint64_t flops_counted();

// ---- CUDA profiler window ------------------------------------------------------------------------------------
// cudaProfilerStart/Stop on every visible GPU (for `nsys profile --capture-range=cudaProfilerApi` and
// `ncu --profile-from-start off`), plus an NVTX/recorder mark "cudaProfilerStart"/"cudaProfilerStop" in the
// trainer layer. Returns true when a CUDA profiler call was made (false on CPU-only machines).
bool cuda_profiler_start();
bool cuda_profiler_stop();

// ---- GPU timing for recorders ----------------------------------------------------------------------------------
// A pair of CUDA events around work queued on a device's compute stream; elapsed_ms() waits for the second.
// On the CPU (or without CUDA) it is inert and elapsed_ms() is negative.
class GpuTimer {
 public:
  GpuTimer() = default;
  ~GpuTimer();
  GpuTimer(GpuTimer&& o) noexcept { *this = std::move(o); }
  GpuTimer& operator=(GpuTimer&& o) noexcept;
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void start(Device device);  // records the first event on the device's current compute stream
  void stop();                // records the second
  bool valid() const { return start_ != nullptr && stop_ != nullptr; }
  // Milliseconds between the events; `origin`'s first event gives GPU timestamps relative to it.
  double elapsed_ms() const;
  double since_ms(const GpuTimer& origin) const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  int device_ = -1;
};

// The GPU's name (e.g. "NVIDIA H100 80GB HBM3"); "" for the CPU or an unusable device.
std::string device_name(Device device);

}  // namespace volt::trace
