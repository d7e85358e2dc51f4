// The log's rank prefix (runtime/log.h): init_process_group sets "[rank R] " when the group has more than one
// rank, so every rank's warnings say where they come from (run with 1, 2 and 3 ranks).
#include <gtest/gtest.h>

#include <string>

#include <volt/distributed/process_group.h>
#include <volt/runtime/log.h>

using namespace volt;

TEST(LogRank, InitProcessGroupSetsTheRankPrefix) {
  const dist::ProcessGroup& pg = dist::default_group();
  const std::string prefix = pg.world_size() > 1 ? "[rank " + std::to_string(pg.rank()) + "] " : "";
  EXPECT_EQ(logging::rank_prefix(), prefix);
  const logging::Level saved = logging::level();
  logging::set_level(logging::Level::info);
  ::testing::internal::CaptureStderr();
  logging::warn("a warning from every rank");
  const std::string err = ::testing::internal::GetCapturedStderr();
  logging::set_level(saved);
  EXPECT_EQ(err, prefix + "volt: warning: a warning from every rank\n");
}
