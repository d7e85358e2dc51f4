// Device parsing and the behaviour of a binary (CUDA-built or not) on a machine without a usable GPU, plus
// a round trip through the GPU where one exists.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>
#include <volt/config.h>

using namespace volt;

TEST(Device, ParsesSpecs) {
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("cuda"), cuda_device(0));
  Device d("cuda:1");
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.str(), "cuda:1");
  EXPECT_EQ(Device("gpu:3"), cuda_device(3));
  EXPECT_EQ(kCPU.str(), "cpu");
  EXPECT_EQ(Device(DeviceType::CPU, 5).index, 0);  // the CPU has no ordinal
}

TEST(Device, RejectsMalformedSpecs) {
  VOLT_EXPECT_ERROR(Device("gpu:x"), "Device", "gpu:x", "cuda:N");
  VOLT_EXPECT_ERROR(Device("cuda:"), "Device", "cuda:");
  VOLT_EXPECT_ERROR(Device("cuda:-1"), "Device", "cuda:-1");
  VOLT_EXPECT_ERROR(Device("tpu"), "Device", "tpu");
  VOLT_EXPECT_ERROR(Device("CPU0"), "Device", "CPU0");
}

TEST(Device, BuildFlagMatchesConfig) { EXPECT_EQ(cuda_built(), VOLT_WITH_CUDA != 0); }

TEST(Device, WithoutAGpuEverythingStaysOnTheCpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: " << cuda_status();
  EXPECT_EQ(cuda_device_count(), 0);
  std::string status = cuda_status();
  EXPECT_FALSE(status.empty());
  if (!cuda_built()) EXPECT_NE(status.find("VOLT_CUDA=OFF"), std::string::npos) << status;
  VOLT_EXPECT_ERROR(empty({2}, DType::f32, cuda_device(0)), "cuda:0");
  VOLT_EXPECT_ERROR(zeros({2}).to(Device("cuda:0")), "Tensor::to", "cuda:0");
  VOLT_EXPECT_ERROR(zeros({2}).cuda(1), "cuda:1");
  VOLT_EXPECT_ERROR(synchronize(cuda_device(0)), "cuda:0");
  // CPU work is unaffected.
  EXPECT_EQ(ones({3}).to(kCPU).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  synchronize(kCPU);
}

TEST(Device, GpuRoundTripWhenAvailable) {
  if (!cuda_available()) GTEST_SKIP() << cuda_status();
  ASSERT_GE(cuda_device_count(), 1);
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor g = a.cuda();
  EXPECT_TRUE(g.is_cuda());
  EXPECT_EQ(g.device(), cuda_device(0));
  Tensor back = (g * 2.0f).cpu();
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  VOLT_EXPECT_ERROR(a + g, "add", "different devices");
  VOLT_EXPECT_ERROR(zeros({1}).to(cuda_device(cuda_device_count())), "does not exist");
}
