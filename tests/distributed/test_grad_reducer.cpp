// GradReducer: N ranks on their shards end with the gradient one process computes on the full batch.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include "distributed/grad_reducer.h"
#include "kernels/ops.h"

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
  EXPECT_EQ(reducer.buckets_launched_during_backward(), 2);  // overlapped with backward, not in finalize
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
  EXPECT_EQ(pg().sequence_number(), seq + 1);
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
