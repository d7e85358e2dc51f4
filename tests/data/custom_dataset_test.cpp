// The custom Dataset of docs/datasets.md (section "Writing a custom dataset"), as written there: its samples, the default
// get_batch stacking, a DataLoader with workers over it, and a DataModule that serves it.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/data/data.h>

namespace {

// --- as in docs/datasets.md ---
// Sample i: input (2) f32 = (i, i^2), target () i64 = i % 2. Samples are computed from the index alone, so
// get() is const, safe to call from several loader workers at once, and reproducible.
class Squares : public volt::data::Dataset {
 public:
  explicit Squares(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  volt::data::Batch get(int64_t i) const override {
    VOLT_CHECK(i >= 0 && i < n_, "Squares: index ", i, " is out of range for ", n_, " samples");
    const auto x = static_cast<float>(i);
    return {volt::from_vector(std::vector<float>{x, x * x}),
            volt::scalar_tensor(static_cast<double>(i % 2), volt::DType::i64)};
  }

 private:
  int64_t n_;
};

struct SquaresData : volt::data::DataModule {
  std::shared_ptr<volt::data::Dataset> train;
  void setup(const std::string&) override { train = std::make_shared<Squares>(100); }
  std::shared_ptr<volt::data::DataLoader> train_dataloader() override {
    return std::make_shared<volt::data::DataLoader>(train, volt::data::DataLoaderOptions{.batch_size = 16,
                                                                                         .shuffle = true});
  }
};
// --- end ---

TEST(CustomDataset, SamplesAndDefaultGetBatch) {
  Squares ds(5);
  EXPECT_EQ(ds.size(), 5);
  const volt::data::Batch s = ds.get(3);
  EXPECT_EQ(s.input.to_vector<float>(), (std::vector<float>{3, 9}));
  EXPECT_EQ(s.target.dim(), 0);
  EXPECT_EQ(s.target.item<int64_t>(), 1);
  const volt::data::Batch b = ds.get_batch({4, 0, 2});
  EXPECT_EQ(b.input.shape(), (volt::Shape{3, 2}));
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{4, 16, 0, 0, 2, 4}));
  EXPECT_EQ(b.target.shape(), (volt::Shape{3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  VOLT_EXPECT_ERROR(ds.get(5), "Squares: index 5 is out of range for 5 samples");
}

TEST(CustomDataset, LoaderWithWorkersAndDataModule) {
  volt::data::DataLoader loader(std::make_shared<Squares>(10), {.batch_size = 4, .num_workers = 2});
  std::vector<float> firsts;
  std::vector<int64_t> sizes;
  for (const volt::data::Batch& b : loader) {
    sizes.push_back(b.size());
    const auto x = b.input.to_vector<float>();
    const auto y = b.target.to_vector<int64_t>();
    for (size_t k = 0; k < y.size(); ++k) {
      EXPECT_EQ(x[2 * k + 1], x[2 * k] * x[2 * k]);
      EXPECT_EQ(y[k], static_cast<int64_t>(x[2 * k]) % 2);
    }
    firsts.push_back(x[0]);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(firsts, (std::vector<float>{0, 4, 8}));

  SquaresData dm;
  dm.setup("fit");
  auto train = dm.train_dataloader();
  EXPECT_EQ(train->size(), 7);
  int64_t seen = 0;
  for (const volt::data::Batch& b : *train) seen += b.size();
  EXPECT_EQ(seen, 100);
}

}  // namespace
