// NpyDataset: from .npy pairs and .npz keys, dtype conversion, sample-count checks, and a DataLoader over it.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/gradcheck.h"
#include <volt/data/data_loader.h>
#include <volt/data/npy.h>
#include <volt/data/npy_dataset.h>
#include <volt/data/npz.h>
#include "data/temp_dir.h"

namespace volt::data {
namespace {

using testing::TempDir;

// inputs (n, 2) f64 row i = (i, 10 i); labels (n) u8 = i % 3.
Tensor inputs(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) {
    v.push_back(static_cast<double>(i));
    v.push_back(10.0 * static_cast<double>(i));
  }
  return from_vector(v, {n, 2});
}
Tensor labels(int64_t n) {
  std::vector<uint8_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(i % 3));
  return from_vector(v, {n});
}

TEST(NpyDataset, FromNpyFilesKeepsDtypesAndRows) {
  TempDir dir;
  write_npy(dir.file("x.npy"), inputs(4));
  write_npy(dir.file("y.npy"), labels(4), {.big_endian = true});
  auto ds = NpyDataset::from_npy(dir.file("x.npy"), dir.file("y.npy"));
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->inputs().dtype(), DType::f64);
  EXPECT_EQ(ds->targets().dtype(), DType::u8);
  const Batch s = ds->get(2);
  EXPECT_EQ(s.input.shape(), (Shape{2}));
  EXPECT_EQ(s.input.to_vector<double>(), (std::vector<double>{2, 20}));
  EXPECT_EQ(s.target.item<int>(), 2);
  VOLT_EXPECT_ERROR(ds->get(4), "out of range");
}

TEST(NpyDataset, DtypeOptionsConvertOnLoad) {
  TempDir dir;
  write_npy(dir.file("x.npy"), inputs(3));
  write_npy(dir.file("y.npy"), labels(3));
  auto ds = NpyDataset::from_npy(dir.file("x.npy"), dir.file("y.npy"),
                                 {.input_dtype = DType::f32, .target_dtype = DType::i64});
  EXPECT_EQ(ds->inputs().dtype(), DType::f32);
  EXPECT_EQ(ds->targets().dtype(), DType::i64);
  EXPECT_EQ(ds->inputs().to_vector<float>(), (std::vector<float>{0, 0, 1, 10, 2, 20}));
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

TEST(NpyDataset, FromNpzKeysAndUnlabelled) {
  TempDir dir;
  write_npz(dir.file("d.npz"), {{"x", inputs(5)}, {"y", labels(5)}, {"features", inputs(5)}, {"ids", labels(5)}},
            /*compress=*/true);
  auto ds = NpyDataset::from_npz(dir.file("d.npz"));
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->get(4).input.to_vector<double>(), (std::vector<double>{4, 40}));
  EXPECT_EQ(ds->get(4).target.item<int>(), 1);
  auto named = NpyDataset::from_npz(dir.file("d.npz"), "features", "ids", {.target_dtype = DType::i64});
  EXPECT_EQ(named->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  auto unlabelled = NpyDataset::from_npz(dir.file("d.npz"), "x", "");
  EXPECT_FALSE(unlabelled->targets().defined());
  EXPECT_FALSE(unlabelled->get(0).target.defined());
  write_npy(dir.file("x.npy"), inputs(2));
  EXPECT_EQ(NpyDataset::from_npy(dir.file("x.npy"), "")->size(), 2);
  VOLT_EXPECT_ERROR(NpyDataset::from_npz(dir.file("d.npz"), "x", "labels"), "no array 'labels'",
                    "'features', 'ids', 'x', 'y'");
}

TEST(NpyDataset, SampleCountsMustAgree) {
  TempDir dir;
  write_npy(dir.file("x.npy"), inputs(5));
  write_npy(dir.file("y.npy"), labels(4));
  VOLT_EXPECT_ERROR(NpyDataset::from_npy(dir.file("x.npy"), dir.file("y.npy")), "x.npy' holds 5 samples",
                    "shape (5, 2)", "y.npy' has shape (4,)", "first dimensions must agree");
  write_npz(dir.file("d.npz"), {{"x", inputs(5)}, {"y", labels(6)}});
  VOLT_EXPECT_ERROR(NpyDataset::from_npz(dir.file("d.npz")), "d.npz' key 'x' holds 5 samples",
                    "d.npz' key 'y' has shape (6,)");
  write_npy(dir.file("scalar.npy"), scalar_tensor(1.0));
  VOLT_EXPECT_ERROR(NpyDataset::from_npy(dir.file("scalar.npy"), ""), "scalar.npy' must be an array of shape (N, ...)",
                    "0-d");
  write_npy(dir.file("y0.npy"), scalar_tensor(1.0));
  VOLT_EXPECT_ERROR(NpyDataset::from_npy(dir.file("x.npy"), dir.file("y0.npy")), "has shape ()");
}

TEST(NpyDataset, DataLoaderYieldsTheExpectedBatches) {
  TempDir dir;
  write_npz(dir.file("d.npz"), {{"x", inputs(5)}, {"y", labels(5)}});
  auto ds = NpyDataset::from_npz(dir.file("d.npz"), "x", "y", {.input_dtype = DType::f32, .target_dtype = DType::i64});
  DataLoader loader(ds, {.batch_size = 2});
  std::vector<Batch> batches;
  for (const Batch& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].input.shape(), (Shape{2, 2}));
  EXPECT_EQ(batches[0].input.to_vector<float>(), (std::vector<float>{0, 0, 1, 10}));
  EXPECT_EQ(batches[1].input.to_vector<float>(), (std::vector<float>{2, 20, 3, 30}));
  EXPECT_EQ(batches[2].input.shape(), (Shape{1, 2}));
  EXPECT_EQ(batches[2].input.to_vector<float>(), (std::vector<float>{4, 40}));
  EXPECT_EQ(batches[0].target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(batches[1].target.to_vector<int64_t>(), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(batches[2].target.to_vector<int64_t>(), (std::vector<int64_t>{1}));

  // Shuffled with workers: every sample once, each input row still paired with its own label.
  DataLoader shuffled(ds, {.batch_size = 2, .shuffle = true, .num_workers = 2, .seed = 7});
  std::vector<int64_t> seen;
  for (const Batch& b : shuffled) {
    const auto x = b.input.to_vector<float>();
    const auto y = b.target.to_vector<int64_t>();
    for (size_t k = 0; k < y.size(); ++k) {
      const auto i = static_cast<int64_t>(x[2 * k]);
      EXPECT_EQ(x[2 * k + 1], 10.0f * static_cast<float>(i));
      EXPECT_EQ(y[k], i % 3);
      seen.push_back(i);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace volt::data
