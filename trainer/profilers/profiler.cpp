#include <volt/trainer/profilers/profiler.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <volt/runtime/allocator.h>
#include <volt/runtime/atomic_file.h>
#include <volt/runtime/error.h>

namespace volt {

ProfilerKind parse_profiler(const std::string& name) {
  if (name.empty() || name == "none") return ProfilerKind::none;
  if (name == "simple") return ProfilerKind::simple;
  if (name == "ops") return ProfilerKind::ops;
  if (name == "advanced") return ProfilerKind::advanced;
  VOLT_FAIL("profiler: unknown profiler '", name, "'; expected one of \"simple\", \"ops\", \"advanced\" or \"\" (none)");
}

std::pair<int64_t, int64_t> parse_profile_steps(const std::string& spec) {
  if (spec.empty()) return {-1, -1};
  const auto colon = spec.find(':');
  auto number = [&](const std::string& s) -> int64_t {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VOLT_CHECK(!s.empty() && used == s.size() && v >= 0, "profile_steps: '", spec,
               "' is not \"A:B\" with whole numbers 0 <= A < B (optimizer steps A to B-1)");
    return v;
  };
  VOLT_CHECK(colon != std::string::npos, "profile_steps: '", spec,
             "' is not \"A:B\" with whole numbers 0 <= A < B (optimizer steps A to B-1)");
  const int64_t a = number(spec.substr(0, colon)), b = number(spec.substr(colon + 1));
  VOLT_CHECK(a < b, "profile_steps: '", spec, "' is an empty window; expected A < B (optimizer steps A to B-1)");
  return {a, b};
}

namespace {
constexpr uint32_t kGpuTidBase = 1u << 16;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}
}  // namespace

Profiler::Profiler(ProfilerKind kind, int64_t max_trace_events) : kind_(kind), max_events_(max_trace_events) {
  VOLT_CHECK(kind != ProfilerKind::none, "Profiler: kind must be simple, ops or advanced");
  VOLT_CHECK(max_trace_events >= 0, "Profiler: max_trace_events must be >= 0, got ", max_trace_events);
}

Profiler::~Profiler() {
  if (trace::recorder() == this) trace::set_recorder(nullptr);
}

bool Profiler::op_level(trace::Layer layer) {
  return layer == trace::Layer::module || layer == trace::Layer::op || layer == trace::Layer::backward ||
         layer == trace::Layer::kernel;
}

int64_t Profiler::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
}

uint32_t Profiler::intern(std::string_view name) {
  auto it = ids_.find(std::string(name));
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

uint32_t Profiler::thread_id() {
  auto [it, fresh] = tids_.emplace(std::this_thread::get_id(), static_cast<uint32_t>(tids_.size()));
  return it->second;
}

uint32_t Profiler::wanted_layers() const {
  using trace::Layer;
  uint32_t m = trace::layer_mask({Layer::trainer, Layer::data, Layer::optim, Layer::comm});
  if (kind_ != ProfilerKind::simple && op_window_) m |= trace::layer_mask({Layer::module, Layer::op, Layer::backward, Layer::kernel});
  return m;
}

void Profiler::start(const std::string& stage, bool op_window) {
  VOLT_CHECK(trace::recorder() == nullptr || trace::recorder() == this,
             "Profiler::start: another profiler is already recording");
  uint32_t layers = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = stage;
    op_window_ = op_window;
    ids_.clear();
    names_.clear();
    agg_.clear();
    events_.clear();
    drop_gpu_locked();
    tids_.clear();
    stacks_.clear();
    dropped_ = 0;
    top_level_ns_ = 0;
    wall_s_ = 0;
    main_thread_ = std::this_thread::get_id();
    thread_id();  // the calling thread is thread 0
    t0_ = Clock::now();
    running_ = true;
    layers = wanted_layers();
  }
  trace::set_recorder(this, layers);
}

void Profiler::set_op_window(bool open) {
  uint32_t layers = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op_window_ = open;
    layers = wanted_layers();
  }
  // Outside the window op-level ranges are not even begun (no lock, no name built).
  trace::set_recorder_layers(this, layers);
}

void Profiler::begin(trace::Layer layer, std::string_view name, const trace::RangeInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) begin_locked(layer, name, info);
}

void Profiler::begin_locked(trace::Layer layer, std::string_view name, const trace::RangeInfo& info) {
  std::vector<Open>& stack = stacks_[std::this_thread::get_id()];
  const bool op = op_level(layer);
  const bool ops_kind = kind_ != ProfilerKind::simple;
  Open o{};
  o.name = intern(name);
  o.layer = layer;
  o.t0_ns = now_ns();
  // An op that dispatches to itself (linear's autocast path calls linear again; all_reduce runs all_reduce_async
  // under its own name) opens a range of the same name inside the first: count the call once.
  const bool repeat = !stack.empty() && stack.back().layer == layer && stack.back().name == o.name;
  o.aggregate = !repeat && (op ? ops_kind && op_window_ : true);
  o.traced = !repeat && ops_kind && (!op || op_window_);
  if (o.traced) {
    if (static_cast<int64_t>(events_.size()) < max_events_) {
      o.event = static_cast<int64_t>(events_.size());
      events_.push_back(Event{o.name, static_cast<uint8_t>(layer), 'X', thread_id(), o.t0_ns, 0, info.bytes});
    } else {
      ++dropped_;
      o.traced = false;
    }
  }
  if (layer == trace::Layer::kernel && info.device.is_cuda() && o.aggregate) {
    const int dev = info.device.index;
    if (!gpu_origin_.count(dev)) {
      // The origin event is recorded on an idle device, so its GPU time is the host time taken just after.
      trace::GpuTimer origin;
      trace::GpuTimer::synchronize(info.device);
      origin.start(info.device);
      trace::GpuTimer::synchronize(info.device);
      gpu_origin_host_ns_[dev] = now_ns();
      gpu_origin_.emplace(dev, std::move(origin));
    }
    if (gpu_pending_.size() >= kMaxPendingGpu) resolve_gpu_locked(/*wait=*/false);
    if (gpu_pending_.size() >= kMaxPendingGpu) resolve_gpu_locked(/*wait=*/true);
    GpuEvent g{o.name, dev, {}};
    if (!timer_pool_.empty()) {
      g.timer = std::move(timer_pool_.back());
      timer_pool_.pop_back();
    }
    g.timer.start(info.device);
    o.gpu = next_gpu_id_++;
    gpu_pending_.emplace(o.gpu, std::move(g));
  }
  stack.push_back(o);
}

void Profiler::end(trace::Layer) {
  std::lock_guard<std::mutex> lock(mu_);
  end_locked();
}

void Profiler::end_locked() {
  auto sit = stacks_.find(std::this_thread::get_id());
  if (sit == stacks_.end() || sit->second.empty()) return;  // opened before this profiler started
  Open o = sit->second.back();
  sit->second.pop_back();
  const int64_t dur = now_ns() - o.t0_ns;
  if (o.aggregate) {
    Agg& a = agg_[{static_cast<uint8_t>(o.layer), o.name}];
    ++a.calls;
    a.total_ns += dur;
    a.min_ns = std::min(a.min_ns, dur);
    a.max_ns = std::max(a.max_ns, dur);
  }
  if (o.event >= 0) events_[o.event].dur_ns = dur;
  if (o.gpu >= 0) {
    auto g = gpu_pending_.find(o.gpu);
    if (g != gpu_pending_.end()) g->second.timer.stop();
  }
  if (sit->second.empty() && !op_level(o.layer) && sit->first == main_thread_) top_level_ns_ += dur;
}

void Profiler::mark(trace::Layer layer, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_ || kind_ == ProfilerKind::simple) return;
  if (static_cast<int64_t>(events_.size()) >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{intern(name), static_cast<uint8_t>(layer), 'i', thread_id(), now_ns(), 0, 0});
}

void Profiler::resolve_gpu_locked(bool wait) {
  // GPU kernel times: device durations per kernel, and trace events on one track per GPU, placed on the host
  // clock through the device's origin event.
  for (auto it = gpu_pending_.begin(); it != gpu_pending_.end();) {
    GpuEvent& g = it->second;
    if (!g.timer.valid()) {
      // Not stopped yet (its range is still open): keep it, unless this is the final pass.
      if (!wait || running_) {
        ++it;
        continue;
      }
    } else if (!wait && !g.timer.done()) {
      ++it;
      continue;
    }
    const double ms = g.timer.elapsed_ms();
    if (ms >= 0) {
      Agg& a = agg_[{static_cast<uint8_t>(trace::Layer::kernel), g.name}];
      a.gpu_ms += ms;
      ++a.gpu_calls;
      auto origin = gpu_origin_.find(g.device);
      const double since = origin == gpu_origin_.end() ? -1 : g.timer.since_ms(origin->second);
      if (kind_ != ProfilerKind::simple && since >= 0) {
        if (static_cast<int64_t>(events_.size()) < max_events_)
          events_.push_back(Event{g.name, static_cast<uint8_t>(trace::Layer::kernel), 'X', kGpuTidBase + g.device,
                                  gpu_origin_host_ns_.at(g.device) + static_cast<int64_t>(since * 1e6),
                                  static_cast<int64_t>(ms * 1e6), 0});
        else
          ++dropped_;
      }
    }
    if (timer_pool_.size() < kMaxPendingGpu) timer_pool_.push_back(std::move(g.timer));
    it = gpu_pending_.erase(it);
  }
}

void Profiler::drop_gpu_locked() noexcept {
  gpu_pending_.clear();
  gpu_origin_.clear();
  gpu_origin_host_ns_.clear();
}

void Profiler::stop() {
  if (trace::recorder() == this) trace::set_recorder(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_) return;
  running_ = false;
  wall_s_ = static_cast<double>(now_ns()) * 1e-9;
  resolve_gpu_locked(/*wait=*/true);
  drop_gpu_locked();
  stacks_.clear();
}

void Profiler::abandon() noexcept {
  if (trace::recorder() == this) trace::set_recorder(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  drop_gpu_locked();
  stacks_.clear();
}

std::vector<ProfileStat> Profiler::action_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProfileStat> rows;
  for (const auto& [key, a] : agg_) {
    const auto layer = static_cast<trace::Layer>(key.first);
    if (op_level(layer)) continue;
    rows.push_back({trace::layer_name(layer), names_[key.second], a.calls, a.total_ns * 1e-9, a.min_ns * 1e-9,
                    a.max_ns * 1e-9, -1, 0});
  }
  std::sort(rows.begin(), rows.end(), [](const ProfileStat& x, const ProfileStat& y) { return x.total_s > y.total_s; });
  return rows;
}

std::vector<ProfileStat> Profiler::op_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProfileStat> rows;
  for (const auto& [key, a] : agg_) {
    const auto layer = static_cast<trace::Layer>(key.first);
    if (!op_level(layer)) continue;
    rows.push_back({trace::layer_name(layer), names_[key.second], a.calls, a.total_ns * 1e-9, a.min_ns * 1e-9,
                    a.max_ns * 1e-9, a.gpu_calls ? a.gpu_ms * 1e-3 : -1, a.gpu_calls});
  }
  std::sort(rows.begin(), rows.end(), [](const ProfileStat& x, const ProfileStat& y) { return x.total_s > y.total_s; });
  return rows;
}

double Profiler::unaccounted_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(0.0, wall_s_ - top_level_ns_ * 1e-9);
}

std::string Profiler::simple_table() const {
  const auto rows = action_stats();
  const double wall = wall_seconds();
  size_t w = 6;
  for (const auto& r : rows) w = std::max(w, std::min<size_t>(r.name.size(), 70));
  const std::string rule(w + 52, '-');
  std::string out = fmt::format("Profiler report: {} ({:.3f} s)\n{}\n", stage_, wall, rule);
  auto out_it = std::back_inserter(out);
  fmt::format_to(out_it, "{:<{}} {:>14} {:>9} {:>12} {:>9}\n{}\n", "Action", w, "Mean (ms)", "Calls", "Total (s)",
                 "Share %", rule);
  fmt::format_to(out_it, "{:<{}} {:>14} {:>9} {:12.4f} {:9.1f}\n", "Total", w, "-", "-", wall, 100.0);
  for (const auto& r : rows) {
    std::string name = r.name.size() > w ? r.name.substr(0, w - 3) + "..." : r.name;
    fmt::format_to(out_it, "{:<{}} {:14.4f} {:9} {:12.4f} {:9.1f}\n", name, w, r.mean_s() * 1e3, r.calls, r.total_s,
                   wall > 0 ? 100.0 * r.total_s / wall : 0.0);
  }
  const double un = unaccounted_seconds();
  fmt::format_to(out_it, "{:<{}} {:>14} {:>9} {:12.4f} {:9.1f}\n{}\n", "(outside any action)", w, "-", "-", un,
                 wall > 0 ? 100.0 * un / wall : 0.0, rule);
  return out;
}

std::string Profiler::ops_table(int top) const {
  const auto rows = op_stats();
  std::ostringstream os;
  os << "Op profile: " << stage_ << " (host time; GPU time from CUDA events where measured)";
  if (dropped_) os << "; " << dropped_ << " trace events over the limit were not kept";
  os << "\n";
  for (const char* layer : {"module", "op", "backward", "kernel"}) {
    std::vector<const ProfileStat*> sel;
    for (const auto& r : rows)
      if (r.layer == layer) sel.push_back(&r);
    if (sel.empty()) continue;
    size_t w = 10;
    for (const auto* r : sel) w = std::max(w, std::min<size_t>(r->name.size(), 60));
    os << fmt::format("\n{:<{}} {:>9} {:>12} {:>12} {:>13}\n", layer, w, "Calls", "Total (ms)", "Mean (us)",
                      "GPU total (ms)")
       << std::string(w + 50, '-') << "\n";
    for (size_t i = 0; i < sel.size() && static_cast<int>(i) < top; ++i) {
      const ProfileStat& r = *sel[i];
      std::string name = r.name.size() > w ? r.name.substr(0, w - 3) + "..." : r.name;
      std::string gpu = r.gpu_total_s >= 0 ? fmt::format("{:.3f}", r.gpu_total_s * 1e3) : "-";
      os << fmt::format("{:<{}} {:9} {:12.3f} {:12.2f} {:>13}\n", name, w, r.calls, r.total_s * 1e3, r.mean_s() * 1e6,
                        gpu);
    }
    if (sel.size() > static_cast<size_t>(top)) os << "(" << sel.size() - top << " more in the CSV)\n";
  }
  return os.str();
}

std::string Profiler::ops_csv() const {
  std::ostringstream os;
  os << "layer,name,calls,total_ms,mean_us,min_us,max_us,gpu_total_ms,gpu_mean_us\n";
  auto emit = [&](const std::vector<ProfileStat>& rows) {
    for (const auto& r : rows) {
      os << fmt::format("{},{},{},{:.6f},{:.3f},{:.3f},{:.3f},", r.layer, csv_field(r.name), r.calls,
                        r.total_s * 1e3, r.mean_s() * 1e6, r.min_s * 1e6, r.max_s * 1e6);
      if (r.gpu_total_s >= 0)
        os << fmt::format("{:.6f},{:.3f}\n", r.gpu_total_s * 1e3, r.gpu_mean_s() * 1e6);
      else
        os << ",\n";
    }
  };
  emit(action_stats());
  emit(op_stats());
  return os.str();
}

std::string Profiler::chrome_trace_json(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> order(events_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Per thread by start time, an enclosing range before the ranges it contains.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events_[a], &y = events_[b];
    if (x.tid != y.tid) return x.tid < y.tid;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.dur_ns > y.dur_ns;
  });
  std::vector<std::string> escaped(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) escaped[i] = nlohmann::json(names_[i]).dump();
  std::string out;
  out.reserve(events_.size() * 120 + 1024);
  auto out_it = std::back_inserter(out);
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"stage\":" + nlohmann::json(stage_).dump() +
         ",\"dropped_events\":" + std::to_string(dropped_) + "},\"traceEvents\":[\n";
  fmt::format_to(out_it, R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"volt rank {}"}}}})",
                 pid, pid);
  std::map<uint32_t, bool> tids;
  for (const Event& e : events_) tids[e.tid] = true;
  for (const auto& [tid, _] : tids) {
    std::string label = tid >= kGpuTidBase ? "cuda:" + std::to_string(tid - kGpuTidBase) + " kernels"
                                           : (tid == 0 ? std::string("main thread") : "thread " + std::to_string(tid));
    fmt::format_to(out_it, ",\n" R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})", pid,
                   tid, label);
  }
  for (size_t i : order) {
    const Event& e = events_[i];
    out += ",\n{\"name\":";
    out += escaped[e.name];
    fmt::format_to(out_it, ",\"cat\":\"{}\",\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3f}",
                   trace::layer_name(static_cast<trace::Layer>(e.layer)), static_cast<char>(e.ph), pid, e.tid,
                   e.ts_ns * 1e-3);
    if (e.ph == 'X')
      fmt::format_to(out_it, ",\"dur\":{:.3f}", e.dur_ns * 1e-3);
    else
      out += ",\"s\":\"t\"";
    if (e.bytes) fmt::format_to(out_it, ",\"args\":{{\"bytes\":{}}}", e.bytes);
    out += "}";
  }
  out += "\n]}\n";
  return out;
}

std::vector<std::string> Profiler::write(const std::string& dir, const std::string& tag, int pid) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VOLT_CHECK(!ec, "Profiler: cannot create the output directory '", dir, "': ", ec.message());
  const std::string stem = (std::filesystem::path(dir) / (stage_ + (tag.empty() ? "" : "-" + tag))).string();
  std::vector<std::string> paths;
  auto put = [&](const std::string& suffix, const std::string& bytes) {
    atomic_write_file(stem + suffix, bytes);
    paths.push_back(stem + suffix);
  };
  if (kind_ == ProfilerKind::simple || kind_ == ProfilerKind::advanced) put("-simple.txt", simple_table());
  if (kind_ == ProfilerKind::ops || kind_ == ProfilerKind::advanced) {
    put("-ops.txt", ops_table(50));
    put("-ops.csv", ops_csv());
    put("-trace.json", chrome_trace_json(pid));
  }
  return paths;
}

std::string memory_report(const std::vector<Device>& devices) {
  std::vector<Device> all{kCPU};
  for (const Device& d : devices)
    if (std::find(all.begin(), all.end(), d) == all.end()) all.push_back(d);
  auto mb = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string out;
  for (const Device& d : all) {
    const MemoryStats s = memory_stats(d);
    if (!out.empty()) out += "; ";
    fmt::format_to(std::back_inserter(out), "{}: {:.1f} MB allocated, {:.1f} MB reserved, {:.1f} MB peak", d.str(),
                   mb(s.allocated), mb(s.reserved), mb(s.peak_allocated));
  }
  return out;
}

}  // namespace volt
