// TensorDataset, the default stacking get_batch, Subset, random_split and the transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "common/gradcheck.h"
#include <volt/data/dataset.h>
#include <volt/data/permutation.h>
#include <volt/data/transforms.h>
#include <volt/kernels/ops.h>

namespace volt::data {
namespace {

// inputs (n, 3) f32 with row i = (10i, 10i+1, 10i+2); targets (n) i64 = i % 4.
std::shared_ptr<TensorDataset> make_rows(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 3));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) x[static_cast<size_t>(i * 3 + j)] = static_cast<float>(10 * i + j);
    y[static_cast<size_t>(i)] = i % 4;
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 3}), from_vector(y, {n}));
}

// A dataset with only get(): exercises Dataset's default stacking get_batch.
class Squares : public Dataset {
 public:
  int64_t size() const override { return 6; }
  Batch get(int64_t i) const override {
    VOLT_CHECK(i >= 0 && i < size(), "Squares::get: index ", i, " out of range");
    return {from_vector(std::vector<double>{double(i), double(i * i)}, {2}), scalar_tensor(double(i), DType::i64)};
  }
};

TEST(TensorDataset, GetReturnsRowViews) {
  auto ds = make_rows(5);
  Batch s = ds->get(3);
  EXPECT_EQ(s.input.shape(), (Shape{3}));
  EXPECT_EQ(s.input.to_vector<float>(), (std::vector<float>{30, 31, 32}));
  EXPECT_EQ(s.target.dim(), 0);
  EXPECT_EQ(s.target.item<int>(), 3);
  EXPECT_EQ(s.size(), 3);  // a sample's "size" is its leading dim
  VOLT_EXPECT_ERROR(ds->get(5), "index 5", "5 samples");
}

TEST(TensorDataset, GetBatchGathersRowsInOrder) {
  auto ds = make_rows(8);
  Batch b = ds->get_batch({6, 1, 1, 7});
  EXPECT_EQ(b.size(), 4);
  EXPECT_EQ(b.input.shape(), (Shape{4, 3}));
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{60, 61, 62, 10, 11, 12, 10, 11, 12, 70, 71, 72}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 1, 3}));
  // The batch owns its memory.
  EXPECT_NE(b.input.storage(), ds->inputs().storage());
  VOLT_EXPECT_ERROR(ds->get_batch({0, 8}), "index 8", "position 1", "8 samples");
  VOLT_EXPECT_ERROR(ds->get_batch({-1}), "index -1");
}

TEST(TensorDataset, PinnedBatchHasSameValues) {
  auto ds = make_rows(4);
  Batch b = ds->get_batch_pinned({3, 0});
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{30, 31, 32, 0, 1, 2}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{3, 0}));
}

TEST(TensorDataset, RejectsMismatchedLengths) {
  VOLT_EXPECT_ERROR(TensorDataset(zeros({4, 2}), zeros({3})), "(3,)", "(4, 2)", "same first dimension");
  VOLT_EXPECT_ERROR(TensorDataset(Tensor(), Tensor()), "inputs");
}

TEST(TensorDataset, UnlabelledDataHasNoTarget) {
  TensorDataset ds(arange(6, DType::i64).view({3, 2}), Tensor());
  Batch b = ds.get_batch({2, 0});
  EXPECT_FALSE(b.target.defined());
  EXPECT_EQ(b.input.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 0, 1}));
}

TEST(Dataset, DefaultGetBatchStacksSamples) {
  Squares ds;
  Batch b = ds.get_batch({4, 2, 5});
  EXPECT_EQ(b.input.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.input.dtype(), DType::f64);
  EXPECT_EQ(b.input.to_vector<double>(), (std::vector<double>{4, 16, 2, 4, 5, 25}));
  EXPECT_EQ(b.target.shape(), (Shape{3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{4, 2, 5}));
  Batch p = ds.get_batch_pinned({1});
  EXPECT_EQ(p.input.to_vector<double>(), (std::vector<double>{1, 1}));
  VOLT_EXPECT_ERROR(ds.get_batch({9}), "index 9");
}

TEST(Dataset, StackSamplesChecksShapes) {
  VOLT_EXPECT_ERROR(stack_samples({zeros({2}), zeros({3})}), "sample 1", "(3,)", "(2,)");
  VOLT_EXPECT_ERROR(stack_samples({}), "empty");
}

TEST(Subset, MapsIndicesThroughBase) {
  auto base = make_rows(10);
  Subset sub(base, {9, 0, 4});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(0).target.item<int>(), 1);  // 9 % 4
  Batch b = sub.get_batch({2, 0});
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{40, 41, 42, 90, 91, 92}));
  EXPECT_EQ(sub.get_batch_pinned({1}).input.to_vector<float>(), (std::vector<float>{0, 1, 2}));
  VOLT_EXPECT_ERROR(sub.get_batch({3}), "index 3", "3 samples");
  VOLT_EXPECT_ERROR(Subset(base, {10}), "index 10", "10 samples");
}

TEST(Randperm, IsAPermutationAndDependsOnSeedAndStream) {
  auto p = randperm(1000, 7, 0);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(p, iota);
  EXPECT_EQ(p, randperm(1000, 7, 0));
  EXPECT_NE(p, randperm(1000, 8, 0));
  EXPECT_NE(p, randperm(1000, 7, 1));
  EXPECT_TRUE(randperm(0, 1).empty());
  EXPECT_EQ(randperm(1, 1), (std::vector<int64_t>{0}));
}

TEST(RandomSplit, CountsAreDisjointCoveringAndDeterministic) {
  auto ds = make_rows(60);
  auto a = random_split(ds, {55, 5}, 42);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]->size(), 55);
  EXPECT_EQ(a[1]->size(), 5);
  std::set<int64_t> all(a[0]->indices().begin(), a[0]->indices().end());
  all.insert(a[1]->indices().begin(), a[1]->indices().end());
  EXPECT_EQ(all.size(), 60u);  // disjoint and covering
  auto b = random_split(ds, {55, 5}, 42);
  EXPECT_EQ(a[1]->indices(), b[1]->indices());
  auto c = random_split(ds, {55, 5}, 43);
  EXPECT_NE(a[1]->indices(), c[1]->indices());
  // Sample k of the split is sample indices[k] of the base.
  const int64_t j = a[1]->indices()[2];
  EXPECT_EQ(a[1]->get(2).input.to_vector<float>()[0], static_cast<float>(10 * j));
}

TEST(RandomSplit, FractionsFloorAndDistributeRemainder) {
  auto ds = make_rows(10);
  auto parts = random_split(ds, {0.34, 0.33, 0.33}, 1);  // floor: 3, 3, 3 -> remainder 1 to the first
  EXPECT_EQ(parts[0]->size(), 4);
  EXPECT_EQ(parts[1]->size(), 3);
  EXPECT_EQ(parts[2]->size(), 3);
  VOLT_EXPECT_ERROR(random_split(ds, {5, 4}, 1), "sum to 9", "10 samples");
  VOLT_EXPECT_ERROR(random_split(ds, {0.5, 0.6}, 1), "sum to 1.1");
  VOLT_EXPECT_ERROR(random_split(ds, {-1, 11}, 1), "non-negative");
}

TEST(Transforms, ToFloatAndNormalize) {
  Tensor u = from_vector(std::vector<uint8_t>{0, 51, 255}, {3});
  Tensor f = to_float(u);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0.0f, 51.0f / 255.0f, 1.0f}));
  Tensor n = normalize(f, 0.5, 0.25);
  auto v = n.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], -2.0f);
  EXPECT_FLOAT_EQ(v[1], (0.2f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(v[2], 2.0f);
  VOLT_EXPECT_ERROR(to_float(f), "u8", "float32");
  VOLT_EXPECT_ERROR(normalize(f, 0, 0), "std must be positive");
  auto ds = std::make_shared<TensorDataset>(u.view({3, 1}), arange(3, DType::i64));
  auto mapped = map_inputs(*ds, compose({to_float, [](const Tensor& x) { return normalize(x, 0.0, 0.5); }}));
  EXPECT_EQ(mapped->inputs().to_vector<float>()[2], 2.0f);
  EXPECT_EQ(mapped->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace volt::data
