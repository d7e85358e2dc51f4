// Named fields in Batch: access and errors, default_collate, Batch::to, pinned copies, and the DataLoader's
// user collate (values, errors naming the batch, workers).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

#include <volt/data/collate.h>
#include <volt/data/data_loader.h>
#include "common/error_message.h"
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt::data {
namespace {

using volt::testing::message_of;

// Sample i: input (2) = (i, 10 i), target () i64 = i, fields "mask" (3) u8 = (i%2, 1, 0) and "weight" () f32 =
// i / 2.
class WithFields : public Dataset {
 public:
  explicit WithFields(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    VOLT_CHECK(i >= 0 && i < n_, "WithFields::get: index ", i, " out of range");
    Batch s;
    s.input = from_vector(std::vector<float>{float(i), 10.0f * float(i)}, {2});
    s.target = scalar_tensor(double(i), DType::i64);
    s.fields["mask"] = from_vector(std::vector<float>{float(i % 2), 1, 0}, {3}).to(DType::u8);
    s.fields["weight"] = scalar_tensor(double(i) / 2);
    return s;
  }

 private:
  int64_t n_;
};

TEST(BatchFields, FieldAccessAndMissingKeyError) {
  Batch b;
  b.input = zeros({4, 2});
  b.fields["mask"] = ones({4});
  b.fields["lengths"] = full({4}, 3, DType::i64);
  EXPECT_TRUE(b.has_field("mask"));
  EXPECT_FALSE(b.has_field("weights"));
  EXPECT_EQ(b.field("lengths").to_vector<int64_t>(), (std::vector<int64_t>{3, 3, 3, 3}));
  b.field("mask") = zeros({4});
  EXPECT_EQ(b.field("mask").to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(b.size(), 4);  // fields do not count
  const Batch& cb = b;
  EXPECT_EQ(message_of([&] { (void)cb.field("weights"); }),
            "Batch::field: no field \"weights\"; the batch has fields \"lengths\", \"mask\"");
  EXPECT_EQ(message_of([&] { (void)Batch().field("x"); }), "Batch::field: no field \"x\"; the batch has no fields");
  EXPECT_EQ(b.nbytes(), size_t(4 * 2 * 4 + 4 * 4 + 4 * 8));
}

TEST(BatchFields, DefaultCollateStacksEveryField) {
  WithFields ds(5);
  std::vector<Batch> samples{ds.get(3), ds.get(0), ds.get(1)};
  Batch b = default_collate(samples);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{3, 30, 0, 0, 1, 10}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(b.field("mask").shape(), (Shape{3, 3}));
  EXPECT_EQ(b.field("mask").dtype(), DType::u8);
  EXPECT_EQ(b.field("mask").to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(b.field("weight").to_vector<float>(), (std::vector<float>{1.5f, 0, 0.5f}));
  // Dataset::get_batch (default) and get_batch_pinned go through the same collate.
  Batch g = ds.get_batch({4, 2});
  EXPECT_EQ(g.field("weight").to_vector<float>(), (std::vector<float>{2, 1}));
  Batch p = ds.get_batch_pinned({4, 2});
  EXPECT_EQ(p.field("mask").to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(p.target.to_vector<int64_t>(), (std::vector<int64_t>{4, 2}));
}

TEST(BatchFields, DefaultCollateErrorsNameTheSampleAndTheDifference) {
  WithFields ds(3);
  Batch a = ds.get(0), b = ds.get(1);
  b.fields.erase("weight");
  b.fields["extra"] = ones({1});
  EXPECT_EQ(message_of([&] { default_collate({a, b}); }),
            "default_collate: sample 1 has fields \"extra\", \"mask\" but sample 0 has \"mask\", \"weight\"; every "
            "sample must have the same field names");
  b = ds.get(1);
  b.fields["mask"] = ones({4});
  EXPECT_EQ(message_of([&] { default_collate({a, b}); }),
            "default_collate (field \"mask\"): sample 1 has shape (4,), dtype float32 on cpu but sample 0 has shape "
            "(3,), dtype uint8 on cpu; every sample must match");
  b = ds.get(1);
  b.target = Tensor();
  EXPECT_EQ(message_of([&] { default_collate({a, b}); }),
            "default_collate: sample 1 has no target but sample 0 has one; every sample must agree");
  EXPECT_EQ(message_of([&] { default_collate({}); }), "default_collate: no samples");
}

TEST(BatchFields, ToCpuKeepsEveryField) {
  WithFields ds(2);
  Batch b = ds.get_batch({0, 1});
  Batch c = b.to(kCPU);
  EXPECT_EQ(c.field("mask").to_vector<int64_t>(), b.field("mask").to_vector<int64_t>());
  EXPECT_EQ(c.fields.size(), 2u);
}

TEST(BatchFields, ToCudaMovesEveryField) {
  if (!cuda_available()) GTEST_SKIP() << "needs a GPU";
  WithFields ds(2);
  Batch p = ds.get_batch_pinned({0, 1});
  Batch d = p.to(Device(DeviceType::CUDA, 0), /*non_blocking=*/true);
  for (const auto& [name, t] : d.fields) EXPECT_TRUE(t.is_cuda()) << name;
  EXPECT_TRUE(d.input.is_cuda());
  EXPECT_EQ(d.field("weight").to_vector<float>(), (std::vector<float>{0, 0.5f}));
  EXPECT_EQ(d.field("mask").to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 1, 1, 0}));
}

// The Trainer's pattern (fetch_batch): each pooled batch is moved with non_blocking while the previous moved
// batches are still held, then the host batch is dropped so its pinned block is refilled. On the CPU the move is
// the identity; on a GPU it is the copy-stream upload (Batch::to). Every batch arrives unchanged and in order.
void expect_non_blocking_batches_in_order(Device device) {
  auto ds = std::make_shared<WithFields>(9);
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .pin_memory = true});
    std::vector<Batch> moved;
    for (int epoch = 0; epoch < 2; ++epoch) {
      int64_t first = 0;  // the sequential sampler's first index of this batch
      for (const Batch& b : loader) {
        moved.push_back(b.to(device, /*non_blocking=*/true));
        if (device.is_cuda()) {  // queue compute that reads the batch before the next upload is issued
          Tensor busy = matmul(full({256, 256}, 1.0, DType::f32, device), full({256, 256}, 1.0, DType::f32, device));
          moved.back().fields["busy"] = busy.mean() + moved.back().input.sum();  // 256 + sum: exact in f32
        }
        if (moved.size() > 3) moved.erase(moved.begin());  // earlier uploads die while later ones are in flight
        const Batch& m = moved.back();
        std::vector<float> want_in, want_w;
        std::vector<int64_t> want_t;
        for (int64_t i = first; i < std::min<int64_t>(first + 2, 9); ++i) {
          want_in.insert(want_in.end(), {float(i), 10.0f * float(i)});
          want_w.push_back(float(i) / 2);
          want_t.push_back(i);
        }
        EXPECT_EQ(m.input.device(), device);
        EXPECT_EQ(m.input.to_vector<float>(), want_in) << workers << " workers, epoch " << epoch;
        EXPECT_EQ(m.target.to_vector<int64_t>(), want_t);
        EXPECT_EQ(m.field("weight").to_vector<float>(), want_w);
        if (device.is_cuda()) {
          double sum_in = 0;
          for (float v : want_in) sum_in += v;
          EXPECT_EQ(m.field("busy").item(), 256.0 + sum_in);
        }
        first += 2;
      }
      EXPECT_EQ(first, 10) << "5 batches per epoch";
    }
  }
}

TEST(BatchFields, NonBlockingMovesArriveUnchangedAndInOrderOnCpu) { expect_non_blocking_batches_in_order(kCPU); }

TEST(BatchFields, NonBlockingUploadsArriveUnchangedAndInOrderOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << "needs a GPU";
  expect_non_blocking_batches_in_order(cuda_device(0));
}

// The Trainer's prefetch (Trainer::fetch_batch): batch i + 1 is uploaded ahead (Batch::upload_ahead) before step
// i's compute is queued, and the compute stream waits for it only when the batch is taken (wait_for_upload).
// Every batch arrives unchanged and in order, while compute queued in between never waited for the upload.
void expect_uploads_ahead_in_order(Device device) {
  auto ds = std::make_shared<WithFields>(9);
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .pin_memory = true});
    std::optional<Batch> next = loader.next();
    if (next) next = next->upload_ahead(device);
    int64_t first = 0;
    Tensor running = zeros({1}, DType::f32, device);
    while (next) {
      Batch batch = std::move(*next);
      next.reset();
      EXPECT_EQ(batch.pending_upload != nullptr, device.is_cuda());
      batch.wait_for_upload();
      EXPECT_EQ(batch.pending_upload, nullptr);
      batch.wait_for_upload();  // a second call does nothing
      if (auto host = loader.next()) next = host->upload_ahead(device);  // the next upload, before "the step"
      running = running + batch.input.sum();  // the step: compute on the compute stream reading the batch
      std::vector<float> want_in, want_w;
      for (int64_t i = first; i < std::min<int64_t>(first + 2, 9); ++i) {
        want_in.insert(want_in.end(), {float(i), 10.0f * float(i)});
        want_w.push_back(float(i) / 2);
      }
      EXPECT_EQ(batch.input.device(), device);
      EXPECT_EQ(batch.input.to_vector<float>(), want_in) << workers << " workers";
      EXPECT_EQ(batch.field("weight").to_vector<float>(), want_w);
      first += 2;
    }
    EXPECT_EQ(first, 10) << "5 batches";
    EXPECT_EQ(running.item(), 11.0 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));
  }
}

TEST(BatchFields, UploadsAheadArriveInOrderOnCpu) { expect_uploads_ahead_in_order(kCPU); }

TEST(BatchFields, UploadsAheadArriveInOrderOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << "needs a GPU";
  expect_uploads_ahead_in_order(cuda_device(0));
}

TEST(BatchFields, LoaderStacksFieldsWithAndWithoutWorkers) {
  auto ds = std::make_shared<WithFields>(5);
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .pin_memory = true});
    std::vector<float> weights;
    for (const Batch& b : loader) {
      auto w = b.field("weight").to_vector<float>();
      weights.insert(weights.end(), w.begin(), w.end());
    }
    EXPECT_EQ(weights, (std::vector<float>{0, 0.5f, 1, 1.5f, 2})) << workers << " workers";
  }
}

// Pads variable-length inputs to the longest and records the lengths in a field.
Batch pad_collate(std::vector<Batch>& samples) {
  int64_t longest = 0;
  for (const Batch& s : samples) longest = std::max(longest, s.input.size(0));
  const int64_t n = static_cast<int64_t>(samples.size());
  std::vector<float> x(static_cast<size_t>(n * longest), -1.0f);
  std::vector<int64_t> len;
  for (int64_t k = 0; k < n; ++k) {
    auto v = samples[k].input.to_vector<float>();
    std::copy(v.begin(), v.end(), x.begin() + k * longest);
    len.push_back(static_cast<int64_t>(v.size()));
  }
  Batch b;
  b.input = from_vector(x, {n, longest});
  b.fields["lengths"] = from_vector(len, {n});
  return b;
}

// Sample i is the sequence (i, i, ..., i) of length i + 1 (not stackable).
class Ragged : public Dataset {
 public:
  int64_t size() const override { return 5; }
  Batch get(int64_t i) const override {
    Batch s;
    s.input = full({i + 1}, double(i));
    return s;
  }
};

TEST(LoaderCollate, UserCollateReplacesStackingWithAnyNumberOfWorkers) {
  auto ds = std::make_shared<Ragged>();
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .pin_memory = true, .collate = pad_collate});
    std::vector<Batch> batches;
    for (const Batch& b : loader) batches.push_back(b);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[0].input.to_vector<float>(), (std::vector<float>{0, -1, 1, 1}));
    EXPECT_EQ(batches[1].input.to_vector<float>(), (std::vector<float>{2, 2, 2, -1, 3, 3, 3, 3}));
    EXPECT_EQ(batches[1].field("lengths").to_vector<int64_t>(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(batches[2].input.to_vector<float>(), (std::vector<float>{4, 4, 4, 4, 4}));
    EXPECT_EQ(batches[2].size(), 1);
  }
}

TEST(LoaderCollate, DefaultCollateErrorNamesTheBatch) {
  DataLoader loader(std::make_shared<Ragged>(), {.batch_size = 2, .sample_transform = [](Batch s, Generator&) {
                      return s;
                    }});
  EXPECT_EQ(message_of([&] { loader.next(); }),
            "DataLoader: default_collate failed for batch 0 of epoch 0: default_collate (input): sample 1 has shape "
            "(2,), dtype float32 on cpu but sample 0 has shape (1,), dtype float32 on cpu; every sample must match");
}

TEST(LoaderCollate, CollateErrorsPropagateWithTheBatchIndexAndTheOriginalNested) {
  auto ds = std::make_shared<WithFields>(8);
  CollateFn failing = [](std::vector<Batch>& samples) {
    if (samples[0].target.item<int64_t>() == 4) throw std::invalid_argument("bad samples");
    return default_collate(samples);
  };
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .collate = failing});
    loader.set_epoch(3);
    EXPECT_TRUE(loader.next().has_value());
    EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
    try {
      loader.next();
      ADD_FAILURE() << "expected an error from batch 2";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "DataLoader: collate failed for batch 2 of epoch 3: bad samples");
      EXPECT_THROW(std::rethrow_if_nested(e), std::invalid_argument);
    }
    // The error ended the pass; the next call starts epoch 4 from the first batch.
    EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(loader.epoch(), 4);
  }
}

TEST(LoaderCollate, DatasetErrorsInTheSamplePathNameTheSample) {
  class Failing : public WithFields {
   public:
    Failing() : WithFields(4) {}
    Batch get(int64_t i) const override {
      VOLT_CHECK(i != 2, "sample 2 is corrupt");
      return WithFields::get(i);
    }
  };
  DataLoader loader(std::make_shared<Failing>(), {.batch_size = 2, .collate = [](std::vector<Batch>& s) {
                      return default_collate(s);
                    }});
  loader.next();
  EXPECT_EQ(message_of([&] { loader.next(); }),
            "DataLoader: dataset.get(2) for batch 1 of epoch 0: sample 2 is corrupt");
}

}  // namespace
}  // namespace volt::data
