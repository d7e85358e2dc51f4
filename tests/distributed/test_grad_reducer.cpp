// GradReducer: N ranks on their shards end with the gradient one process computes on the full batch.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "common/gradcheck.h"
#include <volt/distributed/grad_reducer.h>
#include <volt/kernels/ops.h>

using namespace volt;

namespace {
dist::ProcessGroup& pg() { return dist::default_group(); }

constexpr int64_t kBatch = 6;  // divisible by 1, 2 and 3 ranks

// Tiny linear regression: pred (B, 3) = sum_k x[:, k] * w[k, :] + b; loss = mean_B sum_3 (pred - y)^2.
Tensor loss_of(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b) {
  Tensor pred = (x.unsqueeze(2) * w).sum({1}) + b;  // (B, 3)
  return square(pred - y).sum({1}).mean();
}

struct Data {
  Tensor x, y;  // (kBatch * micro, 4), (kBatch * micro, 3): identical on every rank (same seed)
  explicit Data(int micro = 1, uint64_t seed = 7)
      : x(rand_with_seed({kBatch * micro, 4}, seed, 0) * 2.0 - 1.0), y(rand_with_seed({kBatch * micro, 3}, seed, 1000)) {}
  // This rank's shard of micro-batch m.
  std::pair<Tensor, Tensor> shard(int m) const {
    int64_t n = kBatch / pg().world_size();
    int64_t start = m * kBatch + pg().rank() * n;
    return {x.narrow(0, start, n), y.narrow(0, start, n)};
  }
  std::pair<Tensor, Tensor> full(int m) const { return {x.narrow(0, m * kBatch, kBatch), y.narrow(0, m * kBatch, kBatch)}; }
};

Tensor param(const Shape& s, uint64_t seed) { return (rand_with_seed(s, seed, 0) - 0.5).set_requires_grad(true); }

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 * (1 + std::abs(w[i]))) << what << "[" << i << "]";
}
}  // namespace

TEST(GradReducer, ShardsAverageToFullBatchGradient) {
  Tensor w = param({4, 3}, 11), b = param({3}, 12);
  Tensor w_ref = param({4, 3}, 11), b_ref = param({3}, 12);
  // Tiny buckets: b and w land in separate buckets, b's (registered last) first.
  dist::GradReducer reducer(pg(), {{"w", w}, {"b", b}}, {.bucket_cap_bytes = 8});
  ASSERT_EQ(reducer.bucket_names(), (std::vector<std::vector<std::string>>{{"b"}, {"w"}}));
  Data d;
  auto [xs, ys] = d.shard(0);
  loss_of(xs, ys, w, b).backward();
  // Overlapped with backward, not in finalize (one rank launches nothing at all).
  EXPECT_EQ(reducer.buckets_launched_during_backward(), pg().world_size() > 1 ? 2 : 0);
  reducer.finalize();
  auto [xf, yf] = d.full(0);
  loss_of(xf, yf, w_ref, b_ref).backward();
  expect_close(w.grad(), w_ref.grad(), "w.grad");
  expect_close(b.grad(), b_ref.grad(), "b.grad");
  // A second synced step reuses the buckets and the existing .grad tensors.
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  loss_of(xs, ys, w, b).backward();
  reducer.finalize();
  expect_close(w.grad(), w_ref.grad(), "w.grad step 2");
}

TEST(GradReducer, LargeGradientsAreReducedInPlace) {
  // w (48 bytes) is over the in-place threshold: its own bucket, reduced inside w.grad; b shares a packed one.
  Tensor w = param({4, 3}, 31), b = param({3}, 32);
  Tensor w_ref = param({4, 3}, 31), b_ref = param({3}, 32);
  dist::GradReducer reducer(pg(), {{"w", w}, {"b", b}}, {.in_place_bytes = 40});
  ASSERT_EQ(reducer.bucket_names(), (std::vector<std::vector<std::string>>{{"b"}, {"w"}}));
  Data d;
  auto [xs, ys] = d.shard(0);
  for (int step = 0; step < 2; ++step) {
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    loss_of(xs, ys, w, b).backward();
    const void* grad_storage = w.grad().data_ptr();
    reducer.finalize();
    EXPECT_EQ(w.grad().data_ptr(), grad_storage) << "w.grad was replaced instead of reduced in place";
    auto [xf, yf] = d.full(0);
    w_ref.set_grad(Tensor());
    b_ref.set_grad(Tensor());
    loss_of(xf, yf, w_ref, b_ref).backward();
    expect_close(w.grad(), w_ref.grad(), "w.grad");
    expect_close(b.grad(), b_ref.grad(), "b.grad");
  }
}

TEST(GradReducer, NoSyncAccumulatesThenReducesOnce) {
  Tensor w = param({4, 3}, 21), b = param({3}, 22);
  Tensor w_ref = param({4, 3}, 21), b_ref = param({3}, 22);
  dist::GradReducer reducer(pg(), {{"w", w}, {"b", b}});  // default 25 MB cap: one bucket
  ASSERT_EQ(reducer.bucket_names().size(), 1u);
  Data d(/*micro=*/2);
  uint64_t seq = pg().sequence_number();
  {
    auto guard = reducer.no_sync();
    auto [x0, y0] = d.shard(0);
    loss_of(x0, y0, w, b).backward();
    reducer.finalize();  // no-op without sync
  }
  EXPECT_EQ(pg().sequence_number(), seq);  // no communication during accumulation
  auto [x1, y1] = d.shard(1);
  loss_of(x1, y1, w, b).backward();
  reducer.finalize();
  EXPECT_EQ(pg().sequence_number(), seq + (pg().world_size() > 1 ? 1 : 0));  // one rank: no collective
  auto [xf0, yf0] = d.full(0);
  auto [xf1, yf1] = d.full(1);
  (loss_of(xf0, yf0, w_ref, b_ref) + loss_of(xf1, yf1, w_ref, b_ref)).backward();
  expect_close(w.grad(), w_ref.grad(), "w.grad");
  expect_close(b.grad(), b_ref.grad(), "b.grad");
}

TEST(GradReducer, UnusedParameterIsNamedUnlessAllowed) {
  Tensor w = param({4, 3}, 31), b = param({3}, 32), unused = param({2}, 33);
  Data d;
  auto [xs, ys] = d.shard(0);
  {
    dist::GradReducer reducer(pg(), {{"w", w}, {"head.unused", unused}, {"b", b}});
    loss_of(xs, ys, w, b).backward();
    VOLT_EXPECT_ERROR(reducer.finalize(), "GradReducer", "no gradient", "'head.unused'", "find_unused_parameters");
  }
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  dist::GradReducer reducer(pg(), {{"w", w}, {"head.unused", unused}, {"b", b}},
                            {.bucket_cap_bytes = 8, .find_unused_parameters = true});
  loss_of(xs, ys, w, b).backward();
  reducer.finalize();
  Tensor w_ref = param({4, 3}, 31), b_ref = param({3}, 32);
  auto [xf, yf] = d.full(0);
  loss_of(xf, yf, w_ref, b_ref).backward();
  expect_close(w.grad(), w_ref.grad(), "w.grad");
  expect_close(unused.grad(), zeros({2}), "unused.grad");
}

TEST(GradReducer, BroadcastParametersFromRankZero) {
  int r = pg().rank();
  Tensor w = full({2, 2}, r + 1.0).set_requires_grad(true);
  Tensor steps = full({1}, 10.0 * r, DType::i64);  // a buffer of another dtype
  dist::broadcast_parameters(pg(), {w, steps});
  for (float v : w.to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.0f);
  EXPECT_EQ(steps.to_vector<int64_t>()[0], 0);
  EXPECT_TRUE(w.requires_grad());
}

// Packed buckets reduced either way (Avg in the collective, as with NCCL; or Sum and the division on the copy out,
// the MPI default) give the full-batch gradient, including an unused parameter's gradient created by finalize.
TEST(GradReducer, PackedBucketsAverageOrSum) {
  for (bool avg : {true, false}) {
    SCOPED_TRACE(avg ? "packed_avg" : "packed_sum");
    Tensor w = param({4, 3}, 51), b = param({3}, 52), unused = param({2}, 53);
    Tensor w_ref = param({4, 3}, 51), b_ref = param({3}, 52);
    dist::GradReducer reducer(pg(), {{"w", w}, {"unused", unused}, {"b", b}},
                              {.find_unused_parameters = true, .packed_avg = avg});
    ASSERT_EQ(reducer.bucket_names().size(), 1u);
    Data d;
    auto [xs, ys] = d.shard(0);
    auto [xf, yf] = d.full(0);
    loss_of(xf, yf, w_ref, b_ref).backward();
    for (int step = 0; step < 2; ++step) {  // step 2 writes into the existing .grad tensors
      loss_of(xs, ys, w, b).backward();
      reducer.finalize();
      expect_close(w.grad(), w_ref.grad(), "w.grad");
      expect_close(b.grad(), b_ref.grad(), "b.grad");
      expect_close(unused.grad(), zeros({2}), "unused.grad");
      w.set_grad(Tensor());
      b.set_grad(Tensor());
    }
  }
}

// World size 1 (a single-process group on every rank, and the default group when the job has one rank): the
// reducer leaves every gradient exactly as backward made it (same storage, same bits) and issues nothing.
TEST(GradReducer, OneRankLeavesGradientsUntouched) {
  std::unique_ptr<dist::ProcessGroup> single = dist::make_single_group();
  std::vector<dist::ProcessGroup*> groups = {single.get()};
  if (pg().world_size() == 1) groups.push_back(&pg());
  for (dist::ProcessGroup* g : groups) {
    SCOPED_TRACE(g->backend_name());
    // w over the in-place threshold (its own bucket), b and c packed together.
    Tensor w = param({4, 3}, 41), b = param({3}, 42), c = param({2}, 43);
    Tensor w_ref = param({4, 3}, 41), b_ref = param({3}, 42);
    dist::GradReducer reducer(*g, {{"w", w}, {"b", b}, {"c", c}}, {.find_unused_parameters = true, .in_place_bytes = 40});
    ASSERT_EQ(reducer.bucket_names(), (std::vector<std::vector<std::string>>{{"c", "b"}, {"w"}}));
    Data d;
    auto [xf, yf] = d.full(0);
    for (int step = 0; step < 2; ++step) {
      w.set_grad(Tensor());
      b.set_grad(Tensor());
      c.set_grad(Tensor());
      const uint64_t seq = g->sequence_number();
      (loss_of(xf, yf, w, b) + (c * c).sum()).backward();
      const void* wp = w.grad().data_ptr();
      const void* bp = b.grad().data_ptr();
      const void* cp = c.grad().data_ptr();
      std::vector<double> wv = w.grad().to_vector<double>(), bv = b.grad().to_vector<double>(),
                          cv = c.grad().to_vector<double>();
      reducer.finalize();
      EXPECT_EQ(g->sequence_number(), seq) << "a collective was issued";
      EXPECT_EQ(reducer.buckets_launched_during_backward(), 0);
      EXPECT_EQ(w.grad().data_ptr(), wp);
      EXPECT_EQ(b.grad().data_ptr(), bp);
      EXPECT_EQ(c.grad().data_ptr(), cp);
      EXPECT_EQ(w.grad().to_vector<double>(), wv);
      EXPECT_EQ(b.grad().to_vector<double>(), bv);
      EXPECT_EQ(c.grad().to_vector<double>(), cv);
      // And the values are the plain single-process gradients, bit for bit.
      w_ref.set_grad(Tensor());
      b_ref.set_grad(Tensor());
      loss_of(xf, yf, w_ref, b_ref).backward();
      EXPECT_EQ(w.grad().to_vector<double>(), w_ref.grad().to_vector<double>());
      EXPECT_EQ(b.grad().to_vector<double>(), b_ref.grad().to_vector<double>());
    }
    // The unused-parameter rule still holds on one rank: a zero gradient with find_unused_parameters ...
    c.set_grad(Tensor());
    loss_of(xf, yf, w, b).backward();
    reducer.finalize();
    expect_close(c.grad(), zeros({2}), "unused c.grad");
    // ... and an error naming it without.
    dist::GradReducer strict(*g, {{"w2", w_ref}, {"head.unused", param({2}, 44)}});
    loss_of(xf, yf, w_ref, b_ref).backward();
    VOLT_EXPECT_ERROR(strict.finalize(), "no gradient", "'head.unused'");
  }
}

TEST(GradReducer, WaitStatsCountSyncedStepsAndTheWaitForALateRank) {
  Tensor w = param({4, 3}, 41), b = param({3}, 42);
  dist::GradReducer reducer(pg(), {{"w", w}, {"b", b}});
  const bool multi = pg().world_size() > 1;
  EXPECT_EQ(reducer.wait_stats().steps, 0);
  EXPECT_EQ(reducer.wait_stats().seconds, 0.0);
  Data d;
  const auto shard = d.shard(0);  // not a structured binding: the lambda below captures it (clang < 16)
  const Tensor &xs = shard.first, &ys = shard.second;
  auto step = [&] {
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    loss_of(xs, ys, w, b).backward();
    reducer.finalize();
  };
  step();
  // One process waits for nothing, so it counts nothing.
  EXPECT_EQ(reducer.wait_stats().steps, multi ? 1 : 0);
  if (multi) EXPECT_GT(reducer.wait_stats().seconds, 0.0);
  EXPECT_EQ(reducer.wait_stats().last_seconds, reducer.wait_stats().seconds);
  {  // An accumulation step communicates nothing: not counted.
    auto guard = reducer.no_sync();
    loss_of(xs, ys, w, b).backward();
    reducer.finalize();
  }
  EXPECT_EQ(reducer.wait_stats().steps, multi ? 1 : 0);
  loss_of(xs, ys, w, b).backward();  // the window's last micro-batch, synced
  reducer.finalize();
  EXPECT_EQ(reducer.wait_stats().steps, multi ? 2 : 0);
  // Under VOLT_DISTRIBUTED_DEBUG the check before each collective blocks at the bucket's launch in backward,
  // so the wait for a late rank happens there instead of in finalize.
  if (!multi || pg().debug()) return;
  // Rank 0 reaches backward 500 ms late: every other rank's finalize waits for it, rank 0 itself hardly waits.
  const double before = reducer.wait_stats().seconds;
  if (pg().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  step();
  const auto& st = reducer.wait_stats();
  EXPECT_EQ(st.steps, 3);
  EXPECT_NEAR(st.seconds, before + st.last_seconds, 1e-9);
  if (pg().rank() == 0) EXPECT_LT(st.last_seconds, 0.25);
  else EXPECT_GT(st.last_seconds, 0.25);
}
