// all_gather with different shapes across ranks is a volt::Error on EVERY rank, naming each rank's shape, even
// without VOLT_DISTRIBUTED_DEBUG: a host-side shape exchange runs before the data collective, so mismatched
// counts never reach MPI. The group stays usable afterwards.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>

using namespace volt;

namespace {
dist::ProcessGroup& group() { return dist::default_group(); }
}  // namespace

TEST(AllGatherShapes, DifferentTrailingDimsFailOnEveryRank) {
  if (group().world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int r = group().rank();
  if (group().debug()) GTEST_SKIP() << "debug mode reports this through its own check (test_collectives)";
  Tensor t = ones({2, r == 1 ? 5 : 3});  // rank 1 differs in the trailing dim
  VOLT_EXPECT_ERROR(group().all_gather(t), "all_gather", "rank 0 float32 (2, 3)", "rank 1 float32 (2, 5)",
                    "same dtype and shape");
  VOLT_EXPECT_ERROR(group().all_gather_uneven(t), "all_gather_uneven", "rank 0 float32 (2, 3)",
                    "rank 1 float32 (2, 5)", "trailing");
  // Same numel, different shape: (2, 3) vs (3, 2) would be a silently wrong gather by byte count alone.
  Tensor u = ones(r == 0 ? Shape{3, 2} : Shape{2, 3});
  VOLT_EXPECT_ERROR(group().all_gather(u), "rank 0 float32 (3, 2)", "rank 1 float32 (2, 3)");
  // Different dtypes.
  Tensor v = ones({4}, r == 0 ? DType::f64 : DType::f32);
  VOLT_EXPECT_ERROR(group().all_gather(v), "rank 0 float64 (4)", "rank 1 float32 (4)");
  // The checks ran before any data moved: the group is consistent and still gathers correctly.
  Tensor ok = full({2}, static_cast<double>(r));
  Tensor all = group().all_gather(ok);
  ASSERT_EQ(all.shape(), (Shape{group().world_size(), 2}));
  std::vector<float> vals = all.to_vector<float>();
  for (int i = 0; i < group().world_size(); ++i) EXPECT_EQ(vals[2 * i], static_cast<float>(i));
  // Uneven first dims with equal trailing dims still work.
  std::vector<Tensor> parts = group().all_gather_uneven(ones({r + 1, 2}));
  ASSERT_EQ(static_cast<int>(parts.size()), group().world_size());
  for (int i = 0; i < group().world_size(); ++i) EXPECT_EQ(parts[i].shape(), (Shape{i + 1, 2}));
}
