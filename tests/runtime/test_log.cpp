// volt::logging (runtime/log.h): level filtering, the level names and VOLT_LOG_LEVEL, the rank prefix, warn-once.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/gradcheck.h"
#include <volt/runtime/log.h>

using namespace volt;

namespace {

// Restores the level, the rank prefix and VOLT_LOG_LEVEL at scope exit (the log is process-wide).
struct LogGuard {
  logging::Level saved = logging::level();
  std::optional<std::string> env;
  LogGuard() {
    if (const char* v = std::getenv("VOLT_LOG_LEVEL")) env = v;
  }
  ~LogGuard() {
    if (env) ::setenv("VOLT_LOG_LEVEL", env->c_str(), 1);
    else ::unsetenv("VOLT_LOG_LEVEL");
    logging::set_level(saved);
    logging::set_rank(0, 1);
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST(Log, DebugIsHiddenAtInfoAndShownAtDebug) {
  LogGuard guard;
  logging::set_level(logging::Level::info);
  EXPECT_EQ(logging::level(), logging::Level::info);
  EXPECT_FALSE(logging::enabled(logging::Level::debug));
  EXPECT_TRUE(logging::enabled(logging::Level::info));
  ::testing::internal::CaptureStderr();
  logging::debug("a debug note");
  logging::info("an info note");
  logging::warn("a warning");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "volt: info: an info note\nvolt: warning: a warning\n");

  logging::set_level(logging::Level::debug);
  ::testing::internal::CaptureStderr();
  logging::trace("a trace note");
  logging::debug("a debug note");
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "volt: debug: a debug note\n");

  logging::set_level(logging::Level::error);
  ::testing::internal::CaptureStderr();
  logging::warn("a warning");
  logging::error("an error");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "volt: error: an error\n");

  logging::set_level(logging::Level::off);
  EXPECT_FALSE(logging::enabled(logging::Level::error));
  EXPECT_FALSE(logging::enabled(logging::Level::off));
  ::testing::internal::CaptureStderr();
  logging::error("an error");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");

  logging::set_level(logging::Level::trace);
  ::testing::internal::CaptureStderr();
  logging::trace("a trace note");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "volt: trace: a trace note\n");
  VOLT_EXPECT_ERROR(logging::write(logging::Level::off, "x"), "off", "not a message level");
}

TEST(Log, LevelNamesParseBack) {
  using logging::Level;
  for (Level l : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off})
    EXPECT_EQ(logging::parse_level(logging::level_name(l)), l) << logging::level_name(l);
  EXPECT_STREQ(logging::level_name(logging::Level::warn), "warn");
  EXPECT_EQ(logging::parse_level("WARNING"), logging::Level::warn);
  EXPECT_EQ(logging::parse_level("Debug"), logging::Level::debug);
  VOLT_EXPECT_ERROR(logging::parse_level("verbose"), "\"verbose\"", "trace, debug, info, warn, error, off");
  VOLT_EXPECT_ERROR(logging::parse_level(""), "\"\"", "trace, debug, info, warn, error, off");
  VOLT_EXPECT_ERROR(logging::parse_level(" info"), "\" info\"");
}

TEST(Log, LevelFromTheEnvironment) {
  LogGuard guard;
  ::setenv("VOLT_LOG_LEVEL", "debug", 1);
  EXPECT_EQ(logging::set_level_from_env(), logging::Level::debug);
  EXPECT_EQ(logging::level(), logging::Level::debug);
  ::setenv("VOLT_LOG_LEVEL", "ERROR", 1);
  EXPECT_EQ(logging::set_level_from_env(), logging::Level::error);
  ::setenv("VOLT_LOG_LEVEL", "", 1);
  EXPECT_EQ(logging::set_level_from_env(), logging::Level::info);
  ::unsetenv("VOLT_LOG_LEVEL");
  logging::set_level(logging::Level::off);
  EXPECT_EQ(logging::set_level_from_env(), logging::Level::info);

  // A bad value: info, and a warning naming the value and the accepted ones.
  ::setenv("VOLT_LOG_LEVEL", "loud", 1);
  logging::set_level(logging::Level::debug);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(logging::set_level_from_env(), logging::Level::info);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "volt: warning: VOLT_LOG_LEVEL=\"loud\" is not a log level; expected one of trace, debug, info, warn, "
            "error, off (using info)\n");
}

// The level at start-up: a fresh process (the death-test child re-runs the binary) reads VOLT_LOG_LEVEL at its
// first use of the log.
TEST(LogDeathTest, InitialLevelComesFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // No LogGuard here: it would use the log (and so read the variable) in the child before the statement runs.
  const char* saved = std::getenv("VOLT_LOG_LEVEL");
  const std::optional<std::string> env = saved ? std::optional<std::string>(saved) : std::nullopt;
  auto report = [] {
    std::fprintf(stderr, "level=%s\n", logging::level_name(logging::level()));
    std::exit(0);
  };
  ::setenv("VOLT_LOG_LEVEL", "warn", 1);
  EXPECT_EXIT(report(), ::testing::ExitedWithCode(0), "^level=warn\n$");
  ::unsetenv("VOLT_LOG_LEVEL");
  EXPECT_EXIT(report(), ::testing::ExitedWithCode(0), "^level=info\n$");
  ::setenv("VOLT_LOG_LEVEL", "shouting", 1);
  EXPECT_EXIT(report(), ::testing::ExitedWithCode(0),
              "^volt: warning: VOLT_LOG_LEVEL=\"shouting\" is not a log level; expected one of trace, debug, info, "
              "warn, error, off \\(using info\\)\nlevel=info\n$");
  if (env) ::setenv("VOLT_LOG_LEVEL", env->c_str(), 1);
  else ::unsetenv("VOLT_LOG_LEVEL");
}

TEST(Log, RankPrefixInAGroupOfSeveralRanks) {
  LogGuard guard;
  logging::set_level(logging::Level::info);
  logging::set_rank(1, 2);
  EXPECT_EQ(logging::rank_prefix(), "[rank 1] ");
  ::testing::internal::CaptureStderr();
  logging::warn("from rank one");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "[rank 1] volt: warning: from rank one\n");

  logging::set_rank(0, 1);  // a world of one: no prefix
  EXPECT_EQ(logging::rank_prefix(), "");
  ::testing::internal::CaptureStderr();
  logging::info("alone");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "volt: info: alone\n");

  logging::set_rank(0, 3);
  EXPECT_EQ(logging::rank_prefix(), "[rank 0] ");
}

TEST(Log, WarnOnceWarnsOncePerProcess) {
  LogGuard guard;
  logging::set_level(logging::Level::info);
  ::testing::internal::CaptureStderr();
  int written = 0;
  for (int i = 0; i < 5; ++i) written += logging::warn_once("LogTest: this path runs often");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(written, 1);
  EXPECT_EQ(err, "volt: warning: LogTest: this path runs often\n");

  // A key other than the message: one line for the key whatever the message says.
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(logging::warn_once("LogTest key", "first wording"));
  EXPECT_FALSE(logging::warn_once("LogTest key", "second wording"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "volt: warning: first wording\n");

  // While warnings are filtered out the call does not use the warning up.
  logging::set_level(logging::Level::error);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(logging::warn_once("LogTest: filtered at first"));
  logging::set_level(logging::Level::warn);
  EXPECT_TRUE(logging::warn_once("LogTest: filtered at first"));
  EXPECT_FALSE(logging::warn_once("LogTest: filtered at first"));
  const std::string err2 = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err2, "LogTest: filtered at first"), 1u) << err2;
}
