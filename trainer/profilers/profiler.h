#pragma once
/// @file
/// The Trainer's built-in profilers (TrainerOptions::profiler), fed by the trace ranges of runtime/trace.h.
///
/// @code{.unparsed}
///   "simple"    at the end of fit/validate/test/predict: a table of host time per trainer action (module and
///               callback hooks, loop stages, loader waits, backward, optimizer steps, collectives): mean,
///               calls, total and share of the stage's wall time, printed on rank 0 and written to
///               <dir>/<stage>-simple.txt.
///   "ops"       per-op, per-autograd-node, per-module and per-kernel times and call counts (host timers; on a
///               GPU the kernels' device time from CUDA events too): <dir>/<stage>-ops.csv, the top entries
///               printed, and every range as a Chrome trace <dir>/<stage>-trace.json (chrome://tracing,
///               Perfetto): nested, ordered "X" events per thread, GPU kernels on a track of their own.
///   "advanced"  both.
/// @endcode
/// `<dir>` is TrainerOptions::profiler_dir, else `<log_dir>/profiler`; with several ranks every rank writes its own
/// files (`"<stage>-rank<r>-..."`). With TrainerOptions::profile_steps the op-level recording (not the simple
/// table, which accounts for the whole stage) is limited to that window of optimizer steps.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <volt/runtime/trace.h>

namespace volt {

enum class ProfilerKind { none, simple, ops, advanced };
/// "" / "none", "simple", "ops", "advanced"; anything else is a volt::Error listing the choices.
ProfilerKind parse_profiler(const std::string& name);

/// One row of a profiler table.
struct ProfileStat {
  std::string layer;  ///< trace::layer_name
  std::string name;
  int64_t calls = 0;
  double total_s = 0, min_s = 0, max_s = 0;
  double gpu_total_s = -1;  ///< kernels on a GPU: device time from CUDA events (< 0: not measured)
  int64_t gpu_calls = 0;    ///< launches whose device time was measured (<= calls)
  double mean_s() const { return calls ? total_s / static_cast<double>(calls) : 0.0; }
  double gpu_mean_s() const { return gpu_calls ? gpu_total_s / static_cast<double>(gpu_calls) : -1.0; }
};

class Profiler : public trace::Recorder {
 public:
  /// `max_trace_events` bounds the trace (further events are counted, not kept); aggregates stay exact.
  explicit Profiler(ProfilerKind kind, int64_t max_trace_events = 2'000'000);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  ProfilerKind kind() const { return kind_; }
  /// Starts a stage ("fit", "validate", ...): clears earlier records and installs this profiler as the trace
  /// recorder. `op_window`: whether op-level ranges are recorded from the start (false when a profile_steps
  /// window opens later).
  void start(const std::string& stage, bool op_window = true);
  /// Opens/closes the op-level recording window (TrainerOptions::profile_steps).
  void set_op_window(bool open);
  /// Uninstalls the recorder and resolves the GPU timings still pending (waits for their kernels). Ranges still
  /// open (on loader workers) are left out.
  void stop();
  /// Uninstalls the recorder and drops everything pending without touching the GPU (a failed stage: a sticky
  /// CUDA error must not turn into a hang or a second exception). No report follows.
  void abandon() noexcept;
  bool running() const { return running_; }

  /// Results of the last stage (after stop()).
  double wall_seconds() const { return wall_s_; }
  /// Trainer-level rows (layers trainer, data, optim, comm), by total time, descending.
  std::vector<ProfileStat> action_stats() const;
  /// Op-level rows (layers module, op, backward, kernel), by total time, descending.
  std::vector<ProfileStat> op_stats() const;
  /// Seconds of the stage not covered by any outermost trainer-level range.
  double unaccounted_seconds() const;
  int64_t trace_events() const { return static_cast<int64_t>(events_.size()); }
  int64_t dropped_events() const { return dropped_; }

  /// The "simple" table and the "ops" top-N tables as text.
  std::string simple_table() const;
  std::string ops_table(int top = 20) const;
  /// Writes this stage's files into `dir` (created if needed); `tag` is inserted in the names ("rank1").
  /// `pid` labels the trace's process (the rank). Returns the paths written.
  std::vector<std::string> write(const std::string& dir, const std::string& tag = "", int pid = 0) const;
  std::string chrome_trace_json(int pid = 0) const;
  std::string ops_csv() const;

  /// trace::Recorder
  void begin(trace::Layer layer, std::string_view name, const trace::RangeInfo& info) override;
  void end(trace::Layer layer) override;
  void mark(trace::Layer layer, std::string_view name) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Agg {
    int64_t calls = 0;
    int64_t total_ns = 0, min_ns = INT64_MAX, max_ns = 0;
    double gpu_ms = 0;
    int64_t gpu_calls = 0;
  };
  struct Event {
    uint32_t name;      ///< interned
    uint8_t layer;
    uint8_t ph;         ///< 'X' or 'i'
    uint32_t tid;
    int64_t ts_ns = 0;  ///< from the stage start
    int64_t dur_ns = 0;
    uint64_t bytes = 0;
  };
  struct GpuEvent {
    uint32_t name;
    int device;
    trace::GpuTimer timer;
  };
  struct Open {
    uint32_t name;
    trace::Layer layer;
    bool aggregate;
    bool traced;
    int64_t t0_ns;
    int64_t event = -1;  ///< index in events_ while traced
    int64_t gpu = -1;    ///< id of its GpuEvent in gpu_pending_
  };
  /// GPU timings: at most kMaxPendingGpu kernel ranges wait for their CUDA events; beyond that the finished ones
  /// are resolved (and their events reused), so a long window holds a bounded number of events.
  static constexpr size_t kMaxPendingGpu = 4096;
  static bool op_level(trace::Layer layer);
  /// The layers this profiler asks trace:: for: trainer-level always, op-level while recording them.
  uint32_t wanted_layers() const;  ///< mutex held
  void begin_locked(trace::Layer layer, std::string_view name, const trace::RangeInfo& info);
  void end_locked();
  /// Resolves pending GPU events: the finished ones (all when `wait`), adding their device time to the
  /// aggregates and, in the trace, to a track per GPU.
  void resolve_gpu_locked(bool wait);
  void drop_gpu_locked() noexcept;
  uint32_t intern(std::string_view name);  ///< mutex held
  int64_t now_ns() const;
  uint32_t thread_id();                    ///< mutex held

  ProfilerKind kind_;
  int64_t max_events_;
  mutable std::mutex mu_;
  bool running_ = false;
  bool op_window_ = true;
  std::string stage_;
  Clock::time_point t0_;
  double wall_s_ = 0;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::map<std::pair<uint8_t, uint32_t>, Agg> agg_;
  int64_t top_level_ns_ = 0;  ///< time inside outermost trainer-level ranges (main thread)
  std::vector<Event> events_;
  std::map<int64_t, GpuEvent> gpu_pending_;   ///< by id, in launch order
  int64_t next_gpu_id_ = 0;
  std::vector<trace::GpuTimer> timer_pool_;    ///< resolved timers, reused
  std::map<int, trace::GpuTimer> gpu_origin_;  ///< per device: an event recorded once the device was idle
  std::map<int, int64_t> gpu_origin_host_ns_;  ///< ... and the host time then
  int64_t dropped_ = 0;
  std::unordered_map<std::thread::id, uint32_t> tids_;
  std::thread::id main_thread_;
  std::unordered_map<std::thread::id, std::vector<Open>> stacks_;
};

/// TrainerOptions::profile_steps "A:B" (0 <= A < B) as {A, B}; "" as {-1, -1}. Errors name the option.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& spec);

/// "cpu: 12.3 MB allocated, 40.0 MB reserved, 20.1 MB peak; cuda:0: ..." for the given devices (the CPU always).
std::string memory_report(const std::vector<Device>& devices);

}  // namespace volt
