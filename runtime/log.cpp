#include <volt/runtime/log.h>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_set>

#include <volt/runtime/error.h>

namespace volt::logging {

namespace {
constexpr const char* kAccepted = "trace, debug, info, warn, error, off";

spdlog::level::level_enum spdlog_level(Level l) {
  switch (l) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: break;
  }
  return spdlog::level::off;
}

// The filtering is ours (one atomic load per call); the spdlog logger, kept out of spdlog's registry so that
// a program's own spdlog setup neither sees nor changes it, writes every line it is given.
struct State {
  std::atomic<int> level{static_cast<int>(Level::info)};
  std::shared_ptr<spdlog::logger> logger;
  std::mutex mu;  // guards prefix and warned
  std::string prefix;
  std::unordered_set<std::string> warned;

  State() : logger(std::make_shared<spdlog::logger>("volt", std::make_shared<spdlog::sinks::stderr_sink_mt>())) {
    logger->set_level(spdlog::level::trace);
    logger->flush_on(spdlog::level::trace);  // a line is on stderr before a crash or MPI_Abort can lose it
    logger->set_pattern("volt: %l: %v");
    read_env();
  }

  void read_env() {
    const char* v = std::getenv("VOLT_LOG_LEVEL");
    const std::string value = v ? v : "";
    Level l = Level::info;
    bool bad = false;
    if (!value.empty()) {
      try {
        l = parse_level(value);
      } catch (const Error&) {
        bad = true;
      }
    }
    level.store(static_cast<int>(l), std::memory_order_relaxed);
    if (bad)
      logger->log(spdlog::level::warn,
                  fmt::format("VOLT_LOG_LEVEL=\"{}\" is not a log level; expected one of {} (using info)", value,
                              kAccepted));
  }
};

// Never destroyed: destructors of other static objects may still log at exit.
State& state() {
  static State* s = new State();
  return *s;
}
}  // namespace

Level parse_level(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "trace") return Level::trace;
  if (s == "debug") return Level::debug;
  if (s == "info") return Level::info;
  if (s == "warn" || s == "warning") return Level::warn;
  if (s == "error") return Level::error;
  if (s == "off") return Level::off;
  VOLT_FAIL("log level \"", name, "\" is not one of ", kAccepted);
}

const char* level_name(Level level) {
  switch (level) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "off";
}

Level level() { return static_cast<Level>(state().level.load(std::memory_order_relaxed)); }

void set_level(Level l) {
  VOLT_CHECK(l >= Level::trace && l <= Level::off, "logging::set_level: ", static_cast<int>(l),
             " is not a log level; expected one of ", kAccepted);
  state().level.store(static_cast<int>(l), std::memory_order_relaxed);
}

Level set_level_from_env() {
  state().read_env();
  return level();
}

bool enabled(Level l) { return l != Level::off && l >= level(); }

void set_rank(int rank, int world_size) {
  State& s = state();
  std::string prefix = world_size > 1 ? fmt::format("[rank {}] ", rank) : "";
  std::lock_guard<std::mutex> lock(s.mu);
  if (prefix == s.prefix) return;
  s.prefix = std::move(prefix);
  s.logger->set_pattern(s.prefix + "volt: %l: %v");
}

std::string rank_prefix() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.prefix;
}

void write(Level l, std::string_view message) {
  VOLT_CHECK(l >= Level::trace && l < Level::off, "logging::write: ", l == Level::off ? "off" : "an invalid value",
             " is not a message level; expected one of trace, debug, info, warn, error");
  if (!enabled(l)) return;
  state().logger->log(spdlog_level(l), spdlog::string_view_t(message.data(), message.size()));
}

bool warn_once(std::string_view key, std::string_view message) {
  if (!enabled(Level::warn)) return false;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.warned.emplace(key).second) return false;
  }
  write(Level::warn, message);
  return true;
}

}  // namespace volt::logging
