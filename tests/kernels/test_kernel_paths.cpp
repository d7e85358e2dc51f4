// VOLT_DISABLE_KERNELS (kernels/common/kernel_paths.h): the list of kernel paths to route around. The variable itself
// is read once per process; CTest's kernels_disabled_paths runs test_kernels' half-residual case with it set.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/common/kernel_paths.h>

using namespace volt;
namespace kp = volt::kernel_paths;

TEST(KernelPaths, ParsesNamesAllAndEmpty) {
  EXPECT_EQ(kp::parse(""), 0u);
  EXPECT_EQ(kp::parse(" , "), 0u);
  EXPECT_EQ(kp::parse("all"), kp::kAll);
  EXPECT_EQ(kp::parse("warp_norm"), unsigned{kp::kWarpNorm});
  EXPECT_EQ(kp::parse(" lt_dgelu , packed_columns "), unsigned{kp::kLtDgelu | kp::kPackedColumns});
  EXPECT_EQ(kp::parse("half_residual,half_residual"), unsigned{kp::kHalfResidual});
  EXPECT_EQ(kp::names(kp::kAll),
            "warp_norm,packed_columns,lt_dgelu,half_residual,classifier_rows,chunked_head,lt_bgrad,"
            "chunked_attention");
  EXPECT_EQ(kp::parse("lt_bgrad"), unsigned{kp::kLtBgrad});
  EXPECT_EQ(kp::parse("classifier_rows"), unsigned{kp::kClassifierRows});
  EXPECT_EQ(kp::parse("chunked_head"), unsigned{kp::kChunkedHead});
  EXPECT_EQ(kp::parse("chunked_attention"), unsigned{kp::kChunkedAttention});
  EXPECT_EQ(kp::names(kp::kLtDgelu | kp::kWarpNorm), "warp_norm,lt_dgelu");
  EXPECT_EQ(kp::names(0), "");
  for (unsigned set = 0; set <= kp::kAll; ++set) EXPECT_EQ(kp::parse(kp::names(set)), set) << set;
}

// The backends count the calls that took a path whose fallback a library may choose (the GPU tests assert on it).
TEST(KernelPaths, CountsThePathsTaken) {
  const long long bgrad = kp::times_taken(kp::kLtBgrad), dgelu = kp::times_taken(kp::kLtDgelu);
  kp::note_taken(kp::kLtBgrad);
  kp::note_taken(kp::kLtBgrad);
  EXPECT_EQ(kp::times_taken(kp::kLtBgrad), bgrad + 2);
  EXPECT_EQ(kp::times_taken(kp::kLtDgelu), dgelu);
}

TEST(KernelPaths, AnUnknownNameIsAnErrorNamingTheKnownOnes) {
  VOLT_EXPECT_ERROR(kp::parse("warp_norm,warpnorm"), "VOLT_DISABLE_KERNELS", "unknown kernel path 'warpnorm'",
                    "warp_norm,packed_columns,lt_dgelu,half_residual,classifier_rows", "or all");
}
