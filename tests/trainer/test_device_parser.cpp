#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "trainer/device_parser.h"

using namespace volt;

TEST(DeviceParser, GpuCountsAndLists) {
  EXPECT_EQ(parse_devices("gpu", "3", 4).device_ids, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(parse_devices("gpu", "-1", 4).device_ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_devices("gpu", "auto", 2).device_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_devices("gpu", "1, 3", 4).device_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(parse_devices("gpu", "2,", 4).device_ids, (std::vector<int>{2}));
  EXPECT_EQ(parse_devices("gpu", "[0]", 4).device_ids, (std::vector<int>{0}));
  EXPECT_EQ(parse_devices("gpu", std::vector<int>{1, 3}, 4).device_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(parse_devices("gpu", std::vector<int>{3, 1}, 4).device_ids.front(), 3);  // root = first id
  EXPECT_EQ(parse_devices("cuda", "1", 1).num_processes, 1);
  EXPECT_EQ(parse_devices("gpu", "1, 3", 4).num_processes, 2);
}

TEST(DeviceParser, GpuErrors) {
  VOLT_EXPECT_ERROR(parse_devices("gpu", "0", 4), "devices=0");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "[]", 4), "devices=[] selects no GPU");
  VOLT_EXPECT_ERROR(parse_devices("gpu", std::vector<int>{}, 4), "devices=[]");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "1, 1", 4), "listed twice");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "-2", 4), "-2");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "1, -3", 4), "negative");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "1.5", 4), "1.5");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "a, b", 4), "not an integer");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "7,", 4), "GPU id 7 does not exist");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "5", 4), "only 4");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "1", 0), "no GPU is usable");
  VOLT_EXPECT_ERROR(parse_devices("tpu", "1", 0), "accelerator 'tpu'");
}

TEST(DeviceParser, CpuAndAuto) {
  auto s = parse_devices("cpu", "2", 4);
  EXPECT_EQ(s.accelerator, "cpu");
  EXPECT_EQ(s.num_processes, 2);
  EXPECT_EQ(parse_devices("cpu", "auto", 0).num_processes, 1);
  EXPECT_EQ(parse_devices("auto", "1", 0).accelerator, "cpu");
  EXPECT_EQ(parse_devices("auto", "1", 2).accelerator, "gpu");
  VOLT_EXPECT_ERROR(parse_devices("cpu", "0", 0), "positive number");
  VOLT_EXPECT_ERROR(parse_devices("cpu", "-1", 0), "positive number");
  VOLT_EXPECT_ERROR(parse_devices("cpu", "1,2", 0), "positive number");
  // On this machine there is no usable GPU: the real query resolves auto to the CPU.
  EXPECT_EQ(parse_devices("auto", "auto").accelerator, "cpu");
  VOLT_EXPECT_ERROR(parse_devices("gpu", "1"), "no GPU is usable");
}

TEST(DeviceParser, PickFreeGpusFailsClearlyWithoutNvml) {
  // No NVIDIA driver here: the auto-select option must say why it cannot work rather than pick blindly.
  VOLT_EXPECT_ERROR(pick_free_gpus(1), "pick_free_gpus");
  VOLT_EXPECT_ERROR(pick_free_gpus(0), "k must be positive");
}

#include "trainer/trainer.h"

TEST(DeviceParser, TrainerAutoSelectGpusFlag) {
  // CPU runs ignore the flag; asking for GPUs on this GPU-less machine fails with the parser's reason.
  EXPECT_NO_THROW(Trainer({.accelerator = "cpu", .auto_select_gpus = true, .enable_progress_bar = false,
                           .enable_model_summary = false, .logger = false}));
  VOLT_EXPECT_ERROR(Trainer({.accelerator = "gpu", .devices = "1", .auto_select_gpus = true}), "no GPU is usable");
}
