// SharedTensor: one copy of a dataset per node, filled once by local rank 0 and mapped by the others.
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/gradcheck.h"
#include <volt/distributed/shared_tensor.h>
#include <volt/kernels/ops.h>

using namespace volt;

namespace {
dist::ProcessGroup& pg() { return dist::default_group(); }

// A name every rank agrees on and no concurrent job uses: rank 0's pid.
std::string job_name(const char* tag) {
  Tensor pid = scalar_tensor(static_cast<double>(getpid()), DType::i64);
  pg().broadcast(pid, 0);
  return std::string(tag) + "_" + std::to_string(pid.item<int64_t>());
}
}  // namespace

TEST(SharedTensor, FilledOncePerNodeAndVisibleEverywhere) {
  std::string name = job_name("test_ds");
  int fills = 0;
  Tensor t = dist::SharedTensor::create_or_attach(name, {5, 3}, DType::f32, pg(), [&](Tensor& data) {
    ++fills;
    float* p = data.data<float>();
    for (int i = 0; i < 15; ++i) p[i] = 0.5f * i;
  });
  ASSERT_EQ(t.shape(), (Shape{5, 3}));
  std::vector<float> v = t.to_vector<float>();
  for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(v[i], 0.5f * i);
  // Exactly one fill per node (the machine running this test is one node).
  Tensor total = scalar_tensor(fills, DType::i64);
  pg().all_reduce(total);
  EXPECT_EQ(total.item<int64_t>(), 1);
  EXPECT_EQ(fills, pg().local_rank() == 0 ? 1 : 0);
  // The name is unlinked once everyone has mapped it; the data stays readable.
  pg().barrier();
  EXPECT_NE(access(("/dev/shm" + dist::SharedTensor::segment_name(name)).c_str(), F_OK), 0);
  EXPECT_FLOAT_EQ(t.sum().item<float>(), 0.5f * 105);
}

TEST(SharedTensor, FailedFillIsReportedOnEveryLocalRank) {
  std::string name = job_name("test_fail");
  VOLT_EXPECT_ERROR(dist::SharedTensor::create_or_attach(name, {4}, DType::i64, pg(),
                                                         [](Tensor&) { throw Error("disk on fire"); }),
                    "SharedTensor", "fill failed");
  VOLT_EXPECT_ERROR(dist::SharedTensor::segment_name("a/b"), "no '/'");
}
