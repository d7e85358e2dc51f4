#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <dlfcn.h>

#include <volt/runtime/cuda_api.h>
#include <volt/trainer/strategies/device_parser.h>

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
  // The real query: "auto" is the GPU exactly when one is usable on the machine running the test.
  if (cuda_available()) {
    EXPECT_EQ(parse_devices("auto", "auto").accelerator, "gpu");
    EXPECT_EQ(parse_devices("gpu", "1").device_ids, (std::vector<int>{0}));
    VOLT_EXPECT_ERROR(parse_devices("gpu", std::to_string(cuda_device_count() + 1)), "only");
  } else {
    EXPECT_EQ(parse_devices("auto", "auto").accelerator, "cpu");
    VOLT_EXPECT_ERROR(parse_devices("gpu", "1"), "no GPU is usable");
  }
}

namespace {
bool nvml_present() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib != nullptr) dlclose(lib);
  return lib != nullptr;
}
}  // namespace

TEST(DeviceParser, PickFreeGpus) {
  VOLT_EXPECT_ERROR(pick_free_gpus(0), "k must be positive");
  if (!nvml_present()) {
    // No NVIDIA driver: the auto-select option must say why it cannot work rather than pick blindly.
    VOLT_EXPECT_ERROR(pick_free_gpus(1), "NVML");
    return;
  }
  // With a driver: more GPUs than exist can never be idle; one GPU is either found (a valid, distinct id)
  // or refused with the count of idle GPUs (another process, or this one, may be using it).
  const int n = cuda_device_count();
  VOLT_EXPECT_ERROR(pick_free_gpus(n + 1), "idle GPU");
  try {
    std::vector<int> ids = pick_free_gpus(1);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_GE(ids[0], 0);
    EXPECT_LT(ids[0], n);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("idle GPU"), std::string::npos) << e.what();
  }
}

#include <volt/trainer/trainer.h>

TEST(DeviceParser, TrainerAutoSelectGpusFlag) {
  // CPU runs ignore the flag.
  EXPECT_NO_THROW(Trainer({.accelerator = "cpu", .auto_select_gpus = true, .enable_progress_bar = false,
                           .enable_model_summary = false, .logger = false}));
  if (!cuda_available()) {
    // Asking for GPUs on a GPU-less machine fails with the parser's reason.
    VOLT_EXPECT_ERROR(Trainer({.accelerator = "gpu", .devices = "1", .auto_select_gpus = true}), "no GPU is usable");
    return;
  }
  // On a GPU host: more GPUs than exist is refused by the selection, whatever is idle.
  VOLT_EXPECT_ERROR(Trainer({.accelerator = "gpu", .devices = std::to_string(cuda_device_count() + 1),
                             .auto_select_gpus = true, .enable_progress_bar = false,
                             .enable_model_summary = false, .logger = false}),
                    "GPU");
}

TEST(DeviceParser, AutoIsRememberedForTheNodeLayout) {
  // devices="auto" lets a launcher's world size decide the processes per node (trainer/strategies/node_layout.h); an
  // explicit count or list must match it.
  EXPECT_TRUE(parse_devices("cpu", "auto", 0).devices_auto);
  EXPECT_TRUE(parse_devices("cpu", " auto ", 0).devices_auto);
  EXPECT_TRUE(parse_devices("gpu", "auto", 2).devices_auto);
  EXPECT_EQ(parse_devices("gpu", "auto", 2).num_processes, 2);
  EXPECT_TRUE(parse_devices("auto", "auto", 0).devices_auto);
  EXPECT_FALSE(parse_devices("cpu", "1", 0).devices_auto);
  EXPECT_FALSE(parse_devices("gpu", "-1", 2).devices_auto);
  EXPECT_FALSE(parse_devices("gpu", "0,1", 2).devices_auto);
  EXPECT_EQ(parse_devices("cpu", "auto", 0).num_nodes, 1);  // the Trainer fills in num_nodes
}
