// Collectives of the MPI process group, asserted on every rank (run with 1, 2 and 3 ranks).
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>

using namespace volt;
using volt::dist::ReduceOp;

namespace {
dist::ProcessGroup& pg() { return dist::default_group(); }

void expect_all(const Tensor& t, double v) {
  for (double x : t.to_vector<double>()) EXPECT_DOUBLE_EQ(x, v);
}
}  // namespace

TEST(Collectives, AllReduceSumAvgMinMax) {
  int r = pg().rank(), w = pg().world_size();
  Tensor t = full({2, 3}, r + 1.0);
  pg().all_reduce(t, ReduceOp::Sum);
  expect_all(t, w * (w + 1) / 2.0);
  t = full({2, 3}, r + 1.0, DType::f64);
  pg().all_reduce(t, ReduceOp::Avg);
  expect_all(t, (w + 1) / 2.0);
  t = full({5}, r + 1.0, DType::i64);
  pg().all_reduce(t, ReduceOp::Min);
  expect_all(t, 1);
  pg().all_reduce(t = full({5}, r + 1.0, DType::i32), ReduceOp::Max);
  expect_all(t, w);
  VOLT_EXPECT_ERROR(pg().all_reduce(t, ReduceOp::Avg), "all_reduce", "avg", "int32");
  // int8 travels as int8: sums, minima and maxima are exact, negatives included.
  Tensor i8 = from_vector<int8_t>({static_cast<int8_t>(r + 1), static_cast<int8_t>(-10 * (r + 1))});
  pg().all_reduce(i8, ReduceOp::Sum);
  EXPECT_EQ(i8.dtype(), DType::i8);
  EXPECT_EQ(i8.to_vector<int8_t>(), (std::vector<int8_t>{static_cast<int8_t>(w * (w + 1) / 2),
                                                         static_cast<int8_t>(-10 * w * (w + 1) / 2)}));
  pg().all_reduce(i8 = from_vector<int8_t>({static_cast<int8_t>(-r)}), ReduceOp::Min);
  EXPECT_EQ(i8.to_vector<int8_t>()[0], static_cast<int8_t>(1 - w));
}

TEST(Collectives, AllReduceNonContiguousAndHalf) {
  int r = pg().rank(), w = pg().world_size();
  // A transposed view: the result must land in the view's elements, not in storage order.
  Tensor base = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}) * static_cast<double>(r + 1);
  Tensor view = base.t();
  ASSERT_FALSE(view.is_contiguous());
  pg().all_reduce(view, ReduceOp::Sum);
  double s = w * (w + 1) / 2.0;
  std::vector<float> got = base.to_vector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(got[i], (i + 1) * s);
  Tensor h = full({4}, 0.5 * (r + 1), DType::f16);
  pg().all_reduce(h, ReduceOp::Sum);
  EXPECT_EQ(h.dtype(), DType::f16);
  expect_all(h, 0.5 * s);
}

TEST(Collectives, Broadcast) {
  int r = pg().rank(), w = pg().world_size();
  Tensor t = full({3}, r * 10.0 + 1);
  pg().broadcast(t, w - 1);
  expect_all(t, (w - 1) * 10.0 + 1);
  VOLT_EXPECT_ERROR(pg().broadcast(t, w), "broadcast", "root");
}

TEST(Collectives, AllGatherEqual) {
  int r = pg().rank(), w = pg().world_size();
  Tensor t = from_vector<float>({static_cast<float>(r), r + 0.5f});
  Tensor all = pg().all_gather(t);
  ASSERT_EQ(all.shape(), (Shape{w, 2}));
  std::vector<float> v = all.to_vector<float>();
  for (int i = 0; i < w; ++i) {
    EXPECT_FLOAT_EQ(v[2 * i], i);
    EXPECT_FLOAT_EQ(v[2 * i + 1], i + 0.5f);
  }
  Tensor s = scalar_tensor(r * 2.0, DType::i64);
  Tensor all_s = pg().all_gather(s);
  ASSERT_EQ(all_s.shape(), (Shape{w}));
  for (int i = 0; i < w; ++i) EXPECT_EQ(all_s.to_vector<int64_t>()[i], 2 * i);
}

// FSDP's gather: rank r's (n,) lands in out[r * n, (r + 1) * n) of a preallocated buffer, after wait().
TEST(Collectives, AllGatherIntoAsync) {
  const int r = pg().rank(), w = pg().world_size();
  Tensor in = from_vector<double>({10.0 * r, 10.0 * r + 1});
  Tensor buffer = full({2 * w + 1}, -1.0, DType::f64);
  Tensor out = buffer.narrow(0, 1, 2 * w);
  pg().all_gather_into_async(in, out)->wait();
  std::vector<double> got = buffer.to_vector<double>();
  EXPECT_EQ(got[0], -1.0);  // nothing outside the output
  for (int k = 0; k < w; ++k) {
    EXPECT_EQ(got[1 + 2 * k], 10.0 * k);
    EXPECT_EQ(got[2 + 2 * k], 10.0 * k + 1);
  }
  Tensor wrong = empty({2 * w + 1}, DType::f64);
  VOLT_EXPECT_ERROR(pg().all_gather_into_async(in, wrong), "all_gather_into_async", "contiguous (", "float64");
}

TEST(Collectives, AllGatherUneven) {
  int r = pg().rank(), w = pg().world_size();
  // Rank r contributes r + 1 rows; row i holds (100 r + i, -(100 r + i)).
  std::vector<float> rows;
  for (int i = 0; i <= r; ++i) {
    rows.push_back(100.f * r + i);
    rows.push_back(-(100.f * r + i));
  }
  Tensor t = from_vector<float>(rows, {r + 1, 2});
  std::vector<Tensor> parts = pg().all_gather_uneven(t);
  ASSERT_EQ(static_cast<int>(parts.size()), w);
  for (int q = 0; q < w; ++q) {
    ASSERT_EQ(parts[q].shape(), (Shape{q + 1, 2}));
    std::vector<float> v = parts[q].to_vector<float>();
    for (int i = 0; i <= q; ++i) {
      EXPECT_FLOAT_EQ(v[2 * i], 100.f * q + i);
      EXPECT_FLOAT_EQ(v[2 * i + 1], -(100.f * q + i));
    }
  }
  std::vector<int64_t> sizes;
  Tensor cat = pg().all_gather_cat(t, &sizes);
  ASSERT_EQ(cat.shape(), (Shape{w * (w + 1) / 2, 2}));
  for (int q = 0; q < w; ++q) EXPECT_EQ(sizes[q], q + 1);
  EXPECT_FLOAT_EQ(cat.to_vector<float>()[2 * (cat.size(0) - 1)], 100.f * (w - 1) + (w - 1));
}

TEST(Collectives, CoalescedAllReduceIsOneCollective) {
  int r = pg().rank(), w = pg().world_size();
  std::vector<Tensor> ts = {scalar_tensor(r + 1.0), from_vector<int64_t>({r, 2 * r}),
                            full({2, 2}, 0.25 * (r + 1), DType::f64)};
  uint64_t before = pg().sequence_number();
  pg().all_reduce_coalesced(ts, ReduceOp::Sum);
  EXPECT_EQ(pg().sequence_number(), before + 1);
  double s = w * (w + 1) / 2.0, s0 = w * (w - 1) / 2.0;
  EXPECT_DOUBLE_EQ(ts[0].item(), s);
  EXPECT_EQ(ts[0].dtype(), DType::f32);
  EXPECT_EQ(ts[1].dtype(), DType::i64);
  EXPECT_EQ(ts[1].to_vector<int64_t>(), (std::vector<int64_t>{static_cast<int64_t>(s0), static_cast<int64_t>(2 * s0)}));
  expect_all(ts[2], 0.25 * s);
}

TEST(Collectives, ReduceScatter) {
  int r = pg().rank(), w = pg().world_size();
  // Row j of every rank's input holds r + j; this rank receives rows [2r, 2r + 2) summed over ranks.
  std::vector<float> vals;
  for (int j = 0; j < 2 * w; ++j)
    for (int c = 0; c < 3; ++c) vals.push_back(static_cast<float>(r + j));
  Tensor in = from_vector<float>(vals, {2 * w, 3});
  Tensor out = pg().reduce_scatter(in, ReduceOp::Sum);
  ASSERT_EQ(out.shape(), (Shape{2, 3}));
  std::vector<float> v = out.to_vector<float>();
  double sum_r = w * (w - 1) / 2.0;
  for (int j = 0; j < 2; ++j)
    for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(v[j * 3 + c], sum_r + w * (2 * r + j));
  Tensor avg = pg().reduce_scatter(in, ReduceOp::Avg);
  EXPECT_FLOAT_EQ(avg.to_vector<float>()[0], (sum_r + w * 2.0 * r) / w);
  VOLT_EXPECT_ERROR(pg().reduce_scatter(scalar_tensor(1.0)), "reduce_scatter", "divisible");
  if (w > 1) VOLT_EXPECT_ERROR(pg().reduce_scatter(full({2 * w + 1}, 1.0)), "reduce_scatter", "divisible");
}

TEST(Collectives, BarrierAndSequence) {
  uint64_t before = pg().sequence_number();
  pg().barrier();
  EXPECT_EQ(pg().sequence_number(), before + 1);
  // Every rank issued the same collectives so far, so the sequence numbers agree.
  Tensor seq = scalar_tensor(static_cast<double>(pg().sequence_number()), DType::i64);
  Tensor all = pg().all_gather(seq);
  for (int64_t s : all.to_vector<int64_t>()) EXPECT_EQ(s, static_cast<int64_t>(before + 1));
}

TEST(Collectives, DebugModeReportsShapeMismatchOnEveryRank) {
  if (pg().world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  int r = pg().rank();
  pg().set_debug(true);
  Tensor t = ones({r == 0 ? 3 : 4});
  VOLT_EXPECT_ERROR(pg().all_reduce(t), "mismatch", "all_reduce", "rank 0 called all_reduce", "shape (3)",
                    "rank 1 called all_reduce", "shape (4)");
  // Different ops: rank 0 broadcasts while the others all-gather.
  Tensor u = ones({2});
  if (r == 0) VOLT_EXPECT_ERROR(pg().broadcast(u, 0), "mismatch", "broadcast", "all_gather");
  else VOLT_EXPECT_ERROR(pg().all_gather(u), "mismatch", "broadcast", "all_gather");
  // The check ran before any data moved, so the group is still consistent and usable.
  Tensor ok = ones({2});
  pg().all_reduce(ok);
  pg().set_debug(false);
  expect_all(ok, pg().world_size());
}

TEST(Collectives, TimeoutWhenOnlyRankZeroCalls) {
  if (pg().world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // A group of its own: after the timeout it is broken, while the default group stays usable.
  auto g = dist::make_mpi_group();
  g->set_timeout(2.0);
  if (g->rank() == 0) {
    auto t0 = std::chrono::steady_clock::now();
    VOLT_EXPECT_ERROR(g->all_gather(ones({3})), "all_gather", "sequence #1", "timed out", "not all ranks called it");
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(s, 1.9);
    EXPECT_LT(s, 10.0);
    EXPECT_TRUE(g->broken());
    VOLT_EXPECT_ERROR(g->barrier(), "barrier", "broken");
  }
  pg().barrier();  // the other ranks wait here for rank 0 to finish timing out
}

TEST(Collectives, SingleGroupIsIdentity) {
  auto g = dist::make_single_group();
  EXPECT_EQ(g->world_size(), 1);
  Tensor t = from_vector<float>({1, 2});
  g->all_reduce(t, ReduceOp::Avg);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2}));
  Tensor all = g->all_gather(t);
  EXPECT_EQ(all.shape(), (Shape{1, 2}));
  EXPECT_EQ(g->all_gather_cat(t).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(g->device(), kCPU);
  EXPECT_NO_THROW(g->use_device(kCPU));
}

// Which device a group's collectives take: the CPU for MPI, which refuses a GPU by name (NCCL binds its
// communicator there instead; that path needs GPUs).
TEST(Collectives, GroupDeviceBinding) {
  if (pg().backend_name() != "mpi") GTEST_SKIP() << "the " << pg().backend_name() << " backend";
  EXPECT_EQ(pg().device(), kCPU);
  EXPECT_NO_THROW(pg().use_device(kCPU));
  try {
    pg().use_device(cuda_device(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot take tensors on cuda:0; GPU tensors need the nccl backend"),
              std::string::npos)
        << e.what();
  }
}
