#pragma once
/// @file
/// Named ranges on the timeline, for Nsight and for Volt's own profilers (trainer/profilers/profiler.h).
///
/// A trace::Range marks a stretch of host time: a trainer hook or loop stage, a module's forward (by its dotted
/// name) or backward, an op's forward, an autograd node's backward, a backend kernel launch, an optimizer step, a
/// collective (with its bytes), a loader wait or a host-to-device upload. Each range goes to two places:
///  - NVTX (CUDA-enabled builds; compiled out of CPU-only ones): a push/pop range in its layer's domain
///    ("volt.trainer", "volt.ops", ...; one colour per layer), so Nsight Systems shows the ranges on the CPU
///    timeline and projects them onto the GPU kernels they launched, and Nsight Compute can filter kernels by
///    range (`ncu --nvtx --nvtx-include "volt.ops@linear/"`).
///  - the process's Recorder, when a profiler has installed one (host times, CUDA events for kernel launches).
/// With no NVTX tool attached (nsys/ncu set NVTX_INJECTION64_PATH) and no recorder, a Range costs one relaxed
/// atomic load: its name is not even built (the lambda form).
#include <atomic>
#include <concepts>
#include <initializer_list>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <volt/runtime/device.h>

namespace volt::trace {

/// The layer a range belongs to: its NVTX domain and colour, and a column of the profilers' tables.
/// @code{.unparsed}
///   trainer   hooks and loop stages ("[TrainModule]training_step", "run_training_batch", ...)
///   data      loader waits and host-to-device uploads
///   module    nn::Module forward ("encoder.l1 (Linear)") and its backward ("encoder.l1 (Linear).backward")
///   op        public ops' forward ("linear", "conv2d", "add", ...)
///   backward  autograd nodes ("LinearBackward", ...)
///   kernel    backend launches ("gemm", "binary", "conv2d_forward", ...), timed with CUDA events on a GPU
///   optim     optimizer steps, gradient clipping and unscaling
///   comm      collectives (bytes in RangeInfo)
/// @endcode
/// (One line: nvcc takes a line that starts with `module` for a C++20 module declaration and warns.)
enum class Layer : uint8_t { trainer, data, module, op, backward, kernel, optim, comm };
inline constexpr int kNumLayers = 8;
const char* layer_name(Layer layer);  ///< "trainer", "data", ...
/// NVTX domain name of a layer ("volt.trainer", ...).
const char* layer_domain(Layer layer);

struct RangeInfo {
  Device device = kCPU;  ///< where the range's work runs (kernel and comm ranges)
  uint64_t bytes = 0;    ///< collectives and uploads: bytes moved
};

/// Receives every range while installed (set_recorder). begin/end come in nested pairs per thread; a recorder
/// must be thread-safe (loader workers run ops too). `name` is valid only during the call.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void begin(Layer layer, std::string_view name, const RangeInfo& info) = 0;
  virtual void end(Layer layer) = 0;
  /// An instant event (e.g. "cudaProfilerStart").
  virtual void mark(Layer layer, std::string_view name) {}
};

namespace detail {
/// Bit 0: an NVTX tool is attached (every layer is active); bits 8 + layer: the installed recorder wants that
/// layer's ranges.
extern std::atomic<uint32_t> g_flags;
inline constexpr uint32_t kNvtxBit = 1;
constexpr uint32_t layer_bit(Layer layer) { return 1u << (8 + static_cast<int>(layer)); }
/// An installed recorder, shared by the ranges that saw it: uninstalling detaches it under the write lock, so a
/// range that ends later (on a loader worker, after the recorder was destroyed) finds nothing to call.
struct RecorderSlot;
}  // namespace detail

/// A layer mask for set_recorder (bit per Layer).
constexpr uint32_t layer_mask(std::initializer_list<Layer> layers) {
  uint32_t m = 0;
  for (Layer l : layers) m |= 1u << static_cast<int>(l);
  return m;
}
inline constexpr uint32_t kAllLayers = (1u << kNumLayers) - 1;

/// True when ranges go anywhere (an NVTX tool or a recorder).
inline bool active() { return detail::g_flags.load(std::memory_order_relaxed) != 0; }
/// True when ranges of `layer` go anywhere: an NVTX tool is attached, or the recorder asked for the layer.
inline bool active(Layer layer) {
  return (detail::g_flags.load(std::memory_order_relaxed) & (detail::kNvtxBit | detail::layer_bit(layer))) != 0;
}
/// True in CUDA-enabled builds when an NVTX tool was attached at start-up.
bool nvtx_attached();
/// Installs `r` for the layers in `layers` (nullptr removes the recorder). After set_recorder(nullptr) (or
/// installing another) returns, `r` is never called again, also not by ranges still open on other threads; the
/// caller may then destroy it. Ranges a recorder saw begin and that end after it was removed are not ended on it.
void set_recorder(Recorder* r, uint32_t layers = kAllLayers);
/// Changes the layers of the installed recorder, if it is `r` (a profiling window opening or closing).
void set_recorder_layers(const Recorder* r, uint32_t layers);
Recorder* recorder();

/// A range in flight. Ranges of a layer nobody listens to cost one relaxed atomic load; their name is not even
/// built (the lambda form). Never throws once constructed: a recorder's exception is swallowed (the recorder
/// simply misses that range) and NVTX push/pop stay balanced.
class Range {
 public:
  Range(Layer layer, const char* name, const RangeInfo& info = {}) {
    if (active(layer)) begin(layer, std::string_view(name), info);
  }
  Range(Layer layer, std::string_view name, const RangeInfo& info = {}) {
    if (active(layer)) begin(layer, name, info);
  }
  // The name is built only when the range goes somewhere.
  template <class NameFn>
    requires std::invocable<NameFn&>
  Range(Layer layer, NameFn&& name, const RangeInfo& info = {}) {
    if (active(layer)) begin(layer, std::string_view(std::string(name())), info);
  }
  ~Range() {
    if (nvtx_ || slot_) end();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void begin(Layer layer, std::string_view name, const RangeInfo& info) noexcept;
  void end() noexcept;
  std::shared_ptr<detail::RecorderSlot> slot_;
  Layer layer_ = Layer::trainer;
  bool nvtx_ = false;
};

/// An instant event in `layer` (NVTX mark and recorder mark).
void mark(Layer layer, std::string_view name);

/// The innermost open module range on this thread ("" outside any, or when module ranges go nowhere). Autograd
/// nodes remember it so that their backward can be attributed to the module (kernels/autograd.cpp): a module's
/// backward range ("l1 (Linear).backward") covers the consecutive nodes created inside that module and not inside
/// a submodule, so backward ranges are innermost-only (a container's own backward range holds just the nodes of
/// its own code, its children's nodes are in theirs). Gradient accumulation into a parameter (AccumulateGrad)
/// counts to the module whose backward range is open when it runs.
const std::string& current_module();
/// RAII: a module range that also names the module scope for current_module().
class ModuleRange {
 public:
  template <class NameFn>
    requires std::invocable<NameFn&>
  explicit ModuleRange(NameFn&& name) {
    if (active(Layer::module)) begin(std::string(name()));
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
/// GEMMs and convolutions add their multiply-add count x2 (forward and backward) to a process-wide counter that
/// throughput monitors read. Always on: one relaxed atomic add per GEMM/convolution call.
void count_flops(uint64_t flops);
uint64_t flops_counted();

// ---- CUDA profiler window ------------------------------------------------------------------------------------
/// cudaProfilerStart/Stop with `device` current (for `nsys profile --capture-range=cudaProfilerApi` and
/// `ncu --profile-from-start off`; the Trainer passes its root device, so each rank calls once, on its own GPU),
/// plus an NVTX/recorder mark "cudaProfilerStart"/"cudaProfilerStop" in the trainer layer. Returns true when the
/// CUDA profiler call was made and succeeded; false for a CPU device, a CPU-only build, or a failed call (a
/// warning on stderr: profiling is never a reason to stop training).
bool cuda_profiler_start(Device device);
bool cuda_profiler_stop(Device device);

// ---- GPU timing for recorders ----------------------------------------------------------------------------------
/// A pair of CUDA events around work queued on a device's compute stream; elapsed_ms() waits for the second.
/// On the CPU (or without CUDA) it is inert and elapsed_ms() is negative. Reusable: start() again records a new
/// pair with the same events. Nothing here throws; a failed CUDA call leaves the timer invalid.
class GpuTimer {
 public:
  GpuTimer() = default;
  ~GpuTimer();
  GpuTimer(GpuTimer&& o) noexcept { *this = std::move(o); }
  GpuTimer& operator=(GpuTimer&& o) noexcept;
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void start(Device device) noexcept;  ///< records the first event on the device's current compute stream
  void stop() noexcept;                ///< records the second
  /// Both events recorded in this cycle.
  bool valid() const noexcept { return started_ && stopped_; }
  /// True when the second event has completed on the GPU (elapsed_ms() will not wait); false while pending.
  bool done() const noexcept;
  /// Milliseconds between the events; `origin`'s first event gives GPU timestamps relative to it.
  double elapsed_ms() const noexcept;
  double since_ms(const GpuTimer& origin) const noexcept;
  /// Waits until the device's compute stream has run everything queued so far (true on success).
  static bool synchronize(Device device) noexcept;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  int device_ = -1;
  bool started_ = false, stopped_ = false;
};

/// The GPU's name (e.g. "NVIDIA H100 80GB HBM3"); "" for the CPU or an unusable device.
std::string device_name(Device device);

}  // namespace volt::trace
