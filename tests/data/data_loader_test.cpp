// DataLoader: order, drop_last, shuffle determinism, workers, errors, early destruction, resume.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <time.h>

#include "common/gradcheck.h"
#include <volt/data/data_loader.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt::data {
namespace {

// inputs (n, 2) f32 row i = (i, -i); targets (n) i64 = i.
std::shared_ptr<TensorDataset> make_ids(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 2}), from_vector(y, {n}));
}

std::vector<std::vector<int64_t>> targets_of(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}

// A dataset whose samples take a while (to keep workers busy) and that can fail at one index.
class Slow : public Dataset {
 public:
  Slow(int64_t n, int64_t fail_at = -1, int sleep_us = 200) : n_(n), fail_at_(fail_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    gets.fetch_add(1);
    VOLT_CHECK(i != fail_at_, "Slow::get: sample ", i, " is corrupt");
    return {scalar_tensor(static_cast<double>(i)), scalar_tensor(static_cast<double>(i), DType::i64)};
  }
  mutable std::atomic<int64_t> gets{0};

 private:
  int64_t n_, fail_at_;
  int sleep_us_;
};

TEST(DataLoader, SequentialBatchesAndLastPartialBatch) {
  DataLoader loader(make_ids(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  auto t = targets_of(loader);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(t[2], (std::vector<int64_t>{8, 9}));
  Batch b = *loader.begin();
  EXPECT_EQ(b.input.shape(), (Shape{4, 2}));
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{0, 0, 1, -1, 2, -2, 3, -3}));
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  DataLoader loader(make_ids(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  auto t = targets_of(loader);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1], (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(DataLoader, NextStreamsPassesSeparatedByNullopt) {
  DataLoader loader(make_ids(3), {.batch_size = 2});
  EXPECT_EQ(loader.next()->size(), 2);
  EXPECT_EQ(loader.next()->size(), 1);
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
}

TEST(DataLoader, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  DataLoader a(make_ids(20), {.batch_size = 6, .shuffle = true, .seed = 7});
  DataLoader b(make_ids(20), {.batch_size = 6, .shuffle = true, .seed = 7});
  auto a0 = targets_of(a), a1 = targets_of(a);  // epochs 0 and 1 (passes advance the epoch)
  EXPECT_NE(a0, a1);
  EXPECT_EQ(targets_of(b), a0);
  b.set_epoch(1);
  EXPECT_EQ(targets_of(b), a1);
  b.set_epoch(0);
  EXPECT_EQ(targets_of(b), a0);
  std::vector<int64_t> flat;
  for (auto& v : a0) flat.insert(flat.end(), v.begin(), v.end());
  std::sort(flat.begin(), flat.end());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(flat[static_cast<size_t>(i)], i);
  DataLoader c(make_ids(20), {.batch_size = 6, .shuffle = true, .seed = 8});
  EXPECT_NE(targets_of(c), a0);
}

TEST(DataLoader, ExplicitSamplerDefinesTheOrder) {
  auto sampler = std::make_shared<DistributedSampler>(10, 3, 1, false);
  DataLoader loader(make_ids(10), {.batch_size = 2, .sampler = sampler});
  EXPECT_EQ(loader.size(), 2);
  auto t = targets_of(loader);
  EXPECT_EQ(t, (std::vector<std::vector<int64_t>>{{1, 4}, {7}}));
  loader.set_sampler(std::make_shared<SequentialSampler>(3));
  EXPECT_EQ(targets_of(loader), (std::vector<std::vector<int64_t>>{{0, 1}, {2}}));
}

TEST(DataLoader, WorkersProduceTheSameBatchesAsTheMainThread) {
  auto ds = make_ids(103);
  for (bool shuffle : {false, true}) {
    DataLoader ref(ds, {.batch_size = 8, .shuffle = shuffle, .seed = 3});
    auto expect0 = targets_of(ref), expect1 = targets_of(ref);
    for (int workers : {1, 2, 4}) {
      DataLoader w(ds, {.batch_size = 8, .shuffle = shuffle, .num_workers = workers, .prefetch_factor = 2,
                        .seed = 3});
      EXPECT_EQ(targets_of(w), expect0) << workers << " workers";
      EXPECT_EQ(targets_of(w), expect1) << workers << " workers";
    }
  }
  // Inputs too, not just targets.
  DataLoader w(ds, {.batch_size = 5, .num_workers = 2});
  int64_t k = 0;
  for (const Batch& b : w) {
    auto v = b.input.to_vector<float>();
    for (size_t i = 0; i < v.size(); i += 2) {
      EXPECT_EQ(v[i], static_cast<float>(k));
      EXPECT_EQ(v[i + 1], static_cast<float>(-k));
      ++k;
    }
  }
  EXPECT_EQ(k, 103);
}

TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<Slow>(100, -1, 50);
  DataLoader loader(ds, {.batch_size = 1, .num_workers = 2, .prefetch_factor = 3});
  auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One consumed + at most 2 * 3 more in flight.
  EXPECT_LE(ds->gets.load(), 1 + 6);
  EXPECT_GE(ds->gets.load(), 2);  // workers did run ahead
}

TEST(DataLoader, WorkerExceptionReachesTheConsumer) {
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<Slow>(20, 9, 10);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    int got = 0;
    VOLT_EXPECT_ERROR(
        for (const Batch& b : loader) {
          (void)b;
          ++got;
        },
        "Slow::get: sample 9 is corrupt");
    EXPECT_EQ(got, 2) << workers << " workers";  // batches 0 and 1 arrive, batch 2 holds sample 9
    // The loader is usable afterwards (next pass).
    loader.set_epoch(0);
    EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  }
}

TEST(DataLoader, DestructionMidEpochDoesNotHang) {
  auto ds = std::make_shared<Slow>(10000, -1, 100);
  const auto t0 = std::chrono::steady_clock::now();
  for (bool persistent : {false, true}) {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = 3, .prefetch_factor = 4,
                           .persistent_workers = persistent});
    auto it = loader.begin();
    ++it;
    EXPECT_EQ(it->target.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
  }
  {
    DataLoader never_started(ds, {.batch_size = 4, .num_workers = 2});
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
}

TEST(DataLoader, PersistentWorkersServeSeveralEpochs) {
  auto ds = make_ids(30);
  DataLoader ref(ds, {.batch_size = 7, .shuffle = true, .seed = 1});
  DataLoader w(ds, {.batch_size = 7, .shuffle = true, .num_workers = 2, .persistent_workers = true, .seed = 1});
  for (int e = 0; e < 3; ++e) EXPECT_EQ(targets_of(w), targets_of(ref)) << "epoch " << e;
  // Abandoning a pass halfway and starting another works too.
  w.set_epoch(5);
  ref.set_epoch(5);
  auto it = w.begin();
  EXPECT_EQ(it->target.to_vector<int64_t>(), ref.begin()->target.to_vector<int64_t>());
  w.set_epoch(6);
  ref.set_epoch(6);
  EXPECT_EQ(targets_of(w), targets_of(ref));
}

TEST(DataLoader, StateAndLoadStateResumeMidEpoch) {
  auto ds = make_ids(50);
  for (int workers : {0, 2}) {
    DataLoaderOptions o{.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 99};
    // Straight: epochs 0 and 1.
    DataLoader straight(ds, o);
    auto e0 = targets_of(straight), e1 = targets_of(straight);
    // Interrupted: 5 batches of epoch 0, then save.
    DataLoader first(ds, o);
    std::vector<std::vector<int64_t>> got;
    for (int k = 0; k < 5; ++k) got.push_back(first.next()->target.to_vector<int64_t>());
    LoaderState s = first.state();
    EXPECT_EQ(s.epoch, 0);
    EXPECT_EQ(s.batches_consumed, 5);
    // Resume in a fresh loader.
    DataLoader resumed(ds, o);
    resumed.load_state(s);
    EXPECT_EQ(resumed.state().batches_consumed, 5);
    for (const Batch& b : resumed) got.push_back(b.target.to_vector<int64_t>());
    EXPECT_EQ(got, e0) << workers << " workers";
    EXPECT_EQ(resumed.state().epoch, 1);
    EXPECT_EQ(resumed.state().batches_consumed, 0);
    EXPECT_EQ(targets_of(resumed), e1);
  }
}

TEST(DataLoader, StateAfterTheLastBatchPointsAtTheNextEpoch) {
  DataLoader loader(make_ids(4), {.batch_size = 2});
  loader.next();
  loader.next();
  EXPECT_EQ(loader.state().epoch, 1);
  EXPECT_EQ(loader.state().batches_consumed, 0);
  VOLT_EXPECT_ERROR(loader.load_state({0, 3}), "batches_consumed 3", "2 batches");
}

TEST(DataLoader, PinMemoryReportsWhetherBuffersArePinned) {
  DataLoader loader(make_ids(6), {.batch_size = 3, .num_workers = 1, .pin_memory = true});
  Batch b = *loader.begin();
  EXPECT_EQ(b.input.storage()->pinned, loader.pins_memory());
  EXPECT_EQ(loader.pins_memory(), cuda_available());
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

TEST(DataLoader, RejectsBadOptions) {
  VOLT_EXPECT_ERROR(DataLoader(make_ids(3), {.batch_size = 0}), "batch_size", "got 0");
  VOLT_EXPECT_ERROR(DataLoader(make_ids(3), {.num_workers = -1}), "num_workers");
  VOLT_EXPECT_ERROR(DataLoader(nullptr, {}), "dataset is null");
}

}  // namespace
}  // namespace volt::data
