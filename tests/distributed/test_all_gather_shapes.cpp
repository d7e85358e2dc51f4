// all_gather with different shapes across ranks is a volt::Error on EVERY rank, naming each rank's shape, even
// without VOLT_DISTRIBUTED_DEBUG: a host-side shape exchange runs before the data collective, so mismatched
// counts never reach MPI. The group stays usable afterwards. all_gather_uneven exchanges full shapes and pads,
// so tensors that differ in any dimension gather exactly.
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
  // all_gather_uneven takes any sizes but not different numbers of dimensions or dtypes.
  Tensor nd = r == 1 ? ones({2, 3, 1}) : ones({2, 3});
  VOLT_EXPECT_ERROR(group().all_gather_uneven(nd), "all_gather_uneven", "rank 0 float32 (2, 3)",
                    "rank 1 float32 (2, 3, 1)", "number of dimensions");
  Tensor dt = ones({2, 3}, r == 1 ? DType::f64 : DType::f32);
  VOLT_EXPECT_ERROR(group().all_gather_uneven(dt), "rank 0 float32 (2, 3)", "rank 1 float64 (2, 3)");
  VOLT_EXPECT_ERROR(group().all_gather_cat(t), "all_gather_cat", "(2, 5)", "dimensions after the first");
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

// Rank r holds an (r + 1, 2 - r) tensor (rank 2 of 3: (3, 0)) whose element (i, j) is 100 r + 10 i + j; every
// rank receives every rank's tensor exactly, in its own shape.
TEST(AllGatherShapes, UnevenInEveryDimensionGathersExactly) {
  const int world = group().world_size(), me = group().rank();
  auto make = [](int r) {
    std::vector<double> v;
    for (int i = 0; i < r + 1; ++i)
      for (int j = 0; j < 2 - r; ++j) v.push_back(100.0 * r + 10.0 * i + j);
    return from_vector(v, {r + 1, 2 - r});
  };
  for (DType dt : {DType::f64, DType::f32, DType::i64, DType::u8, DType::i8}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<Tensor> parts = group().all_gather_uneven(make(me).to(dt));
    ASSERT_EQ(static_cast<int>(parts.size()), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(parts[r].shape(), (Shape{r + 1, 2 - r}));
      EXPECT_EQ(parts[r].dtype(), dt);
      EXPECT_EQ(parts[r].to(DType::f64).to_vector<double>(), make(r).to_vector<double>()) << "rank " << r;
    }
  }
  // Three dimensions, each rank larger in a different one; the padding never leaks into the result.
  Shape s{1, 1, 1};
  s[static_cast<size_t>(me % 3)] = 2 + me;
  std::vector<Tensor> parts = group().all_gather_uneven(full(s, static_cast<double>(me + 1)));
  for (int r = 0; r < world; ++r) {
    Shape e{1, 1, 1};
    e[static_cast<size_t>(r % 3)] = 2 + r;
    EXPECT_EQ(parts[r].shape(), e);
    for (float v : parts[r].to_vector<float>()) EXPECT_EQ(v, static_cast<float>(r + 1));
  }
}
