// The log level as a Trainer option (TrainerOptions::log_level), a flag (--log-level) and a config key
// (log_level), and the Trainer's warnings going through volt::logging.
#include <algorithm>

#include "common/gradcheck.h"
#include "examples/example_common.h"
#include "trainer/trainer_test_util.h"
#include <volt/distributed/process_group.h>
#include <volt/runtime/log.h>

using namespace volt;
using namespace volt::test;

namespace {

struct LevelGuard {
  logging::Level saved = logging::level();
  ~LevelGuard() { logging::set_level(saved); }
};

struct Parsed {
  bool ok = false;
  int code = 0;
  std::string err;
  examples::Args a;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  Parsed p;
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  p.ok = examples::parse_args(static_cast<int>(args.size()), argv.data(), "test", p.a, p.code);
  ::testing::internal::GetCapturedStdout();
  p.err = ::testing::internal::GetCapturedStderr();
  return p;
}

}  // namespace

TEST(LogLevel, FlagAndConfigKey) {
  const Parsed dflt = parse({});
  ASSERT_TRUE(dflt.ok) << dflt.err;
  EXPECT_EQ(dflt.a.trainer.log_level, "");  // keep the level in effect

  const Parsed p = parse({"--log-level", "debug"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.trainer.log_level, "debug");

  const Parsed bad = parse({"--log-level", "loud"});
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.code, 0);
  for (const char* w : {"--log-level", "\"loud\"", "trace, debug, info, warn, error, off"})
    EXPECT_NE(bad.err.find(w), std::string::npos) << "'" << bad.err << "' lacks '" << w << "'";

  ScratchDir dir("log_level_config");
  const std::string file = (dir.path / "run.yaml").string();
  std::ofstream(file) << "trainer:\n  log_level: error\n";
  const Parsed c = parse({"--config", file});
  ASSERT_TRUE(c.ok) << c.err;
  EXPECT_EQ(c.a.trainer.log_level, "error");
}

TEST(LogLevel, TrainerOptionSetsTheLevel) {
  LevelGuard guard;
  logging::set_level(logging::Level::info);
  { Trainer t(TrainerOptions{.accelerator = "cpu", .max_steps = 1, .log_level = "debug"}); }
  EXPECT_EQ(logging::level(), logging::Level::debug);
  { Trainer t(TrainerOptions{.accelerator = "cpu", .max_steps = 1}); }  // "" keeps it
  EXPECT_EQ(logging::level(), logging::Level::debug);
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.accelerator = "cpu", .log_level = "chatty"}), "Trainer",
                    "\"chatty\"", "trace, debug, info, warn, error, off");
  EXPECT_EQ(logging::level(), logging::Level::debug);
}

TEST(LogLevel, TrainerWarningsFollowTheLevel) {
  LevelGuard guard;
  // The warning when neither max_epochs nor max_steps is set: shown at warn, hidden at error.
  ::testing::internal::CaptureStderr();
  { Trainer t(TrainerOptions{.accelerator = "cpu", .enable_progress_bar = false, .log_level = "warn"}); }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("volt: warning: Trainer: neither max_epochs nor max_steps is set"), std::string::npos) << err;
  ::testing::internal::CaptureStderr();
  { Trainer t(TrainerOptions{.accelerator = "cpu", .enable_progress_bar = false, .log_level = "error"}); }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("1000 epochs"), std::string::npos) << err;
}

TEST(LogLevel, ProcessGroupStartIsADebugNote) {
  LevelGuard guard;
  ASSERT_FALSE(dist::is_initialized());
  logging::set_level(logging::Level::debug);
  ::testing::internal::CaptureStderr();
  dist::init_process_group("single");
  dist::finalize_process_group();
  logging::set_level(logging::Level::info);
  dist::init_process_group("single");
  dist::finalize_process_group();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "volt: debug: init_process_group: backend single, rank 0 of 1\n");  // once: hidden at info
  EXPECT_EQ(logging::rank_prefix(), "");  // a world of one
}
