// MnistDataModule on synthetic files and, when installed, on the real Fashion-MNIST.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "common/gradcheck.h"
#include <volt/data/data_module.h>
#include <volt/data/idx.h>
#include "data/temp_dir.h"
#include <volt/kernels/ops.h>

namespace volt::data {
namespace {

using testing::TempDir;

void write_split(const TempDir& dir, const std::string& prefix, int64_t n) {
  std::vector<uint8_t> img(static_cast<size_t>(n * 784)), lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < 784; ++p) img[static_cast<size_t>(i * 784 + p)] = static_cast<uint8_t>(i);
    lab[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 10);
  }
  write_idx(dir.file(prefix + "-images-idx3-ubyte.gz"), from_vector(img, {n, 28, 28}), true);
  write_idx(dir.file(prefix + "-labels-idx1-ubyte.gz"), from_vector(lab, {n}), true);
}

std::set<float> first_pixels(DataLoader& loader) {
  std::set<float> out;
  for (const Batch& b : loader) {
    auto v = b.input.to_vector<float>();
    for (int64_t k = 0; k < b.size(); ++k) out.insert(v[static_cast<size_t>(k * 784)]);
  }
  return out;
}

TEST(MnistDataModule, SplitsTrainElevenToOneAndLoadsTest) {
  TempDir dir;
  write_split(dir, "train", 36);  // val = round(36 / 12) = 3
  write_split(dir, "t10k", 7);
  MnistDataModule dm(dir.str(), /*batch_size=*/4, /*num_workers=*/0, /*seed=*/5);
  dm.prepare_data();
  dm.setup("fit");
  EXPECT_EQ(dm.train_dataset()->size(), 33);
  EXPECT_EQ(dm.val_dataset()->size(), 3);
  EXPECT_EQ(dm.test_dataset(), nullptr);
  VOLT_EXPECT_ERROR(dm.test_dataloader(), "setup");
  dm.setup("test");
  EXPECT_EQ(dm.test_dataset()->size(), 7);

  auto train = dm.train_dataloader();
  auto val = dm.val_dataloader();
  EXPECT_EQ(train->size(), 9);
  EXPECT_EQ(val->size(), 1);
  Batch b = *train->begin();
  EXPECT_EQ(b.input.shape(), (Shape{4, 1, 28, 28}));
  EXPECT_EQ(b.input.dtype(), DType::f32);
  EXPECT_EQ(b.target.dtype(), DType::i64);
  // Every pixel of image i is i: normalised, the train and val images are disjoint and cover all 36.
  auto tr = first_pixels(*train), va = first_pixels(*val);
  EXPECT_EQ(tr.size(), 33u);
  EXPECT_EQ(va.size(), 3u);
  for (float v : va) EXPECT_EQ(tr.count(v), 0u);
  const float px5 = (5.0f / 255.0f - 0.1307f) / 0.3081f;
  EXPECT_TRUE(tr.count(px5) + va.count(px5) == 1);
  // The test loader keeps file order.
  auto test = dm.test_dataloader();
  EXPECT_EQ(test->begin()->target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  // Same seed, same split.
  MnistDataModule again(dir.str(), 4, 0, 5);
  again.setup("");
  EXPECT_EQ(first_pixels(*again.val_dataloader()), va);
}

TEST(MnistDataModule, MissingDirectoryFailsInPrepareData) {
  TempDir dir;
  MnistDataModule dm(dir.file("none"));
  VOLT_EXPECT_ERROR(dm.prepare_data(), "does not exist", "none");
  VOLT_EXPECT_ERROR(dm.setup("bogus"), "unknown stage 'bogus'");
}

TEST(MnistDataModule, RealFashionMnistTemplateSplit) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed under " << dir;
  MnistDataModule dm(dir, 16, 0, 42);
  dm.prepare_data();
  dm.setup("");
  EXPECT_EQ(dm.train_dataset()->size(), 55000);
  EXPECT_EQ(dm.val_dataset()->size(), 5000);
  EXPECT_EQ(dm.test_dataset()->size(), 10000);
  EXPECT_EQ(dm.train_dataloader()->size(), 3438);  // ceil(55000 / 16)
  EXPECT_EQ(dm.test_dataloader()->size(), 625);
  Batch b = *dm.test_dataloader()->begin();
  auto v = b.input.to_vector<float>();
  const float lo = (0.0f - 0.1307f) / 0.3081f, hi = (1.0f - 0.1307f) / 0.3081f;
  for (float x : v) {
    ASSERT_GE(x, lo - 1e-6f);
    ASSERT_LE(x, hi + 1e-6f);
  }
}

}  // namespace
}  // namespace volt::data
