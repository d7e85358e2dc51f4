#pragma once
/// @file
/// Volt's diagnostics: the warnings and notes the libraries write on stderr, filtered by one process-wide level.
/// Output the user asked for (progress bar, model summary, profiler tables, printed metrics) is not logging and
/// goes to stdout regardless of the level.
///
/// @code
///   volt::logging::warn("Trainer: neither max_epochs nor max_steps is set; ...");
///     stderr: "volt: warning: Trainer: neither max_epochs nor max_steps is set; ..."
///   volt::logging::set_level(volt::logging::Level::debug);   // or VOLT_LOG_LEVEL=debug, or --log-level debug
/// @endcode
///
/// Every line is "volt: <level>: <message>", preceded by "[rank R] " in a process group of more than one rank
/// (dist::init_process_group sets it). Messages are whole lines (no trailing newline). All functions are
/// thread-safe; a line is never interleaved with another thread's. (The namespace is `logging`, not `log`:
/// volt::log is the op.)
#include <string>
#include <string_view>

namespace volt::logging {

/// From most to least verbose; `off` silences everything. The default is `info`.
enum class Level { trace, debug, info, warn, error, off };

/// "trace", "debug", "info", "warn" (or "warning"), "error", "off", in any case. Anything else is a volt::Error
/// naming the accepted values.
Level parse_level(std::string_view name);
/// "trace", "debug", "info", "warn", "error", "off" (what parse_level reads back).
const char* level_name(Level level);

/// The level in effect. Before the first set_level it comes from the environment variable VOLT_LOG_LEVEL
/// (read once, at the first use of the log): unset or empty means info; a value parse_level refuses leaves info
/// and logs a warning naming the value and the accepted ones.
Level level();
void set_level(Level level);
/// Reads VOLT_LOG_LEVEL again as at start-up (unset or empty: info; a bad value: info and a warning) and returns
/// the level now in effect.
Level set_level_from_env();
/// Whether a message at `level` would be written (check it before building an expensive message).
bool enabled(Level level);

/// "[rank R] " before every line when world_size > 1; no prefix otherwise. The distributed layer calls it when
/// a process group is created (and with (0, 1) when it is finalised).
void set_rank(int rank, int world_size);
/// The prefix in effect: "" or "[rank R] ".
std::string rank_prefix();

/// Writes `message` at `level` when enabled(level). `off` is not a message level (a volt::Error).
void write(Level level, std::string_view message);
inline void trace(std::string_view message) { write(Level::trace, message); }
inline void debug(std::string_view message) { write(Level::debug, message); }
inline void info(std::string_view message) { write(Level::info, message); }
inline void warn(std::string_view message) { write(Level::warn, message); }
inline void error(std::string_view message) { write(Level::error, message); }

/// A warning written at most once per process for each `key`, however often the code path runs; calls while
/// warnings are filtered out (level above warn) do not use it up. Returns whether it was written now.
bool warn_once(std::string_view key, std::string_view message);
/// The message is its own key.
inline bool warn_once(std::string_view message) { return warn_once(message, message); }

}  // namespace volt::logging
