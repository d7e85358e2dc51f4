// The cuDNN benchmark switch (kernels/cudnn_benchmark.h) and the convolution plan key it is part of
// (kernels/common/conv_plan_key.h), tested on the CPU: the key building is host code.
#include <gtest/gtest.h>

#include <string>

#include <volt/kernels/common/conv_plan_key.h>
#include <volt/kernels/cudnn_benchmark.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/tensor.h>

using namespace volt;

namespace {

// Restores the process-wide switch after a test.
struct BenchmarkRestore {
  bool saved = cudnn_benchmark();
  ~BenchmarkRestore() { set_cudnn_benchmark(saved); }
};

ConvKey key_for(ConvPlanMode mode, int64_t batch = 8) {
  return conv_plan_key(ConvPlanKind::Forward, /*device_index=*/0, /*dtype=*/3, mode, {batch, 3, 28, 28},
                       {16, 3, 5, 5}, {1, 1, 2, 2, 1, 1});
}

}  // namespace

TEST(CudnnBenchmark, SwitchIsOffByDefaultAndRoundTrips) {
  BenchmarkRestore restore;
  EXPECT_FALSE(cudnn_benchmark());  // nothing in this test binary turns it on before
  set_cudnn_benchmark(true);
  EXPECT_TRUE(cudnn_benchmark());
  set_cudnn_benchmark(false);
  EXPECT_FALSE(cudnn_benchmark());
}

TEST(CudnnBenchmark, PlanKeyCarriesTheMode) {
  const ConvKey heuristics = key_for({.tf32 = false, .benchmark = false});
  const ConvKey timed = key_for({.tf32 = false, .benchmark = true});
  EXPECT_EQ(heuristics.v[kConvKeyBenchmark], 0);
  EXPECT_EQ(timed.v[kConvKeyBenchmark], 1);
  EXPECT_FALSE(heuristics == timed);
  // Only the mode differs.
  for (size_t i = 0; i < kConvKeySize; ++i)
    if (i != kConvKeyBenchmark) EXPECT_EQ(heuristics.v[i], timed.v[i]) << "slot " << i;
  EXPECT_EQ(key_for({.tf32 = true, .benchmark = true}).v[kConvKeyTf32], 1);
  EXPECT_EQ(timed.v[kConvKeyTf32], 0);
  EXPECT_NE(ConvKeyHash()(heuristics), ConvKeyHash()(timed));
}

TEST(CudnnBenchmark, PlanKeyHoldsEveryField) {
  const ConvKey k = conv_plan_key(ConvPlanKind::BackwardFilter, 1, 5, {.tf32 = true, .benchmark = false},
                                  {2, 4, 10, 12}, {6, 4, 3, 3}, {2, 1, 0, 1, 1, 2});
  const std::array<int64_t, kConvKeySize> want{2, 1, 5, 1, 0, 2, 4, 10, 12, 6, 4, 3, 3, 2, 1, 0, 1, 1, 2};
  EXPECT_EQ(k.v, want);
}

TEST(CudnnBenchmark, SwitchingPlansAgainAndSwitchingBackReusesThePlan) {
  BenchmarkRestore restore;
  PlanCache<ConvKey, std::string, ConvKeyHash> plans(8);
  int made = 0;
  // As cudnn_ops.cu does: the mode is read from the switches when the key is made.
  auto plan = [&] {
    const bool bench = cudnn_benchmark();
    return plans.get_or_create(key_for({.tf32 = false, .benchmark = bench}), [&] {
      ++made;
      return std::make_shared<const std::string>(bench ? "timed" : "heuristic");
    });
  };
  set_cudnn_benchmark(false);
  EXPECT_EQ(*plan(), "heuristic");
  EXPECT_EQ(*plan(), "heuristic");
  set_cudnn_benchmark(true);
  EXPECT_EQ(*plan(), "timed");
  EXPECT_EQ(made, 2);
  set_cudnn_benchmark(false);
  EXPECT_EQ(*plan(), "heuristic");
  EXPECT_EQ(made, 2);
  EXPECT_EQ(plans.hits(), 2);
  EXPECT_EQ(plans.misses(), 2);
}

TEST(CudnnBenchmark, NoEffectOnTheCpu) {
  // The CPU has one convolution algorithm: forward and both gradients are bit-identical either way.
  BenchmarkRestore restore;
  std::vector<std::vector<float>> results[2];
  for (int on = 0; on < 2; ++on) {
    set_cudnn_benchmark(on == 1);
    Tensor x = randn_with_seed({2, 3, 9, 9}, 5, 0).set_requires_grad();
    Tensor w = randn_with_seed({4, 3, 3, 3}, 6, 0).set_requires_grad();
    Tensor y = conv2d(x, w, Tensor(), {2, 2}, {1, 1});
    (y * y).sum().backward();
    results[on] = {y.detach().contiguous().to_vector<float>(), x.grad().to_vector<float>(),
                   w.grad().to_vector<float>()};
  }
  ASSERT_EQ(results[0].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(results[0][i], results[1][i]) << "result " << i;
  EXPECT_EQ(results[0][0].size(), 2u * 4 * 5 * 5);
}
