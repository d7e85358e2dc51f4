// linear_cross_entropy (kernels/fused_ops.h, docs/fused_ops.md): the chunked head against its composition, linear()
// then cross_entropy(); chunking; autocast with an f32 master weight; the memory it holds; the single backward; and
// the errors for bad arguments. Finite differences and the device x dtype sweep are the op table's
// (tests/kernels/op_table/op_table_rows_fused.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "common/fused_test_util.h"
#include "common/gradcheck.h"
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/fused_ops.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_all_near;
using volt::testing::leaf;
using volt::testing::rand_f64;
using volt::testing::targets;

namespace {

// Loss, x's and weight's gradients equal linear() then cross_entropy()'s, for mean and sum, with ignored rows, in
// one chunk, several (the last one short) and single rows, under an upstream gradient other than 1.
TEST(LinearCrossEntropy, EqualsLinearThenCrossEntropy) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
      for (int64_t chunk : {0, 5, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (red == Reduction::Mean ? " mean" : " sum") + " chunk " +
                     std::to_string(chunk));
        const double tol = dt == DType::f64 ? 1e-12 : 3e-6;
        const Tensor x0 = rand_f64({13, 8}, 40, -1, 1).to(dt), w0 = rand_f64({37, 8}, 41, -1, 1).to(dt);
        const Tensor t = targets(13, 37, 3, true);
        Tensor x = leaf(x0), w = leaf(w0), xr = leaf(x0), wr = leaf(w0);
        Tensor loss = linear_cross_entropy(x, w, t, {.reduction = red, .ignore_index = -1, .chunk_rows = chunk});
        Tensor ref = cross_entropy(linear(xr, wr), t, red, -1);
        EXPECT_EQ(loss.dtype(), dt);
        expect_all_near(loss, ref, tol, tol, "loss");
        mul(loss, 0.75).backward();
        mul(ref, 0.75).backward();
        expect_all_near(x.grad(), xr.grad(), tol, tol, "x's gradient");
        expect_all_near(w.grad(), wr.grad(), tol, tol, "weight's gradient");
        EXPECT_EQ(x.grad().to_vector<double>()[1 * 8 + 2], 0.0) << "an ignored row sends no gradient to x";
      }
    }
  }
}

// Under autocast the product runs in its dtype and the classifier in f32. The f32 master weight receives an f32
// gradient accumulated over the chunks; both gradients match an f64 computation from the rounded operands within
// the half dtype's rounding of the logits and of their gradient. For f16 that gradient is written before the mean's
// 1 / count: at V = 300 and N = 96 it would be about 1 / (N V) = 3.5e-5 per element, near f16's subnormals.
TEST(LinearCrossEntropy, AutocastKeepsTheMasterWeightsGradientInF32) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = 96, c = 16, v = 300;
    const Tensor x0 = rand_f64({n, c}, 42, -1, 1).to(DType::f32), w0 = rand_f64({v, c}, 43, -1, 1).to(DType::f32);
    const Tensor t = targets(n, v, 1, false);
    Tensor x = leaf(x0), w = leaf(w0);
    {
      AutocastGuard ac(true, dt);
      Tensor loss = linear_cross_entropy(x, w, t, {.chunk_rows = 40});
      EXPECT_EQ(loss.dtype(), DType::f32) << "a loss under autocast is f32";
      loss.backward();
    }
    EXPECT_EQ(x.grad().dtype(), DType::f32);
    EXPECT_EQ(w.grad().dtype(), DType::f32);
    Tensor xr = leaf(x0.to(dt).to(DType::f64)), wr = leaf(w0.to(dt).to(DType::f64));
    Tensor ref = cross_entropy(linear(xr, wr), t);
    ref.backward();
    const double gx = max(abs(xr.grad())).item(), gw = max(abs(wr.grad())).item();
    expect_all_near(x.grad(), xr.grad(), 2e-2 * gx, 0, "x's gradient");
    expect_all_near(w.grad(), wr.grad(), 2e-2 * gw, 0, "weight's gradient");
    EXPECT_GT(max(abs(w.grad())).item(), 0.5 * gw) << "the gradient did not underflow";
  }
}

TEST(LinearCrossEntropy, ChunkingChangesNothingButRounding) {
  const Tensor x0 = rand_f64({21, 6}, 44), w0 = rand_f64({9, 6}, 45);
  const Tensor t = targets(21, 9, 2, true);
  Tensor x1 = leaf(x0), w1 = leaf(w0);
  Tensor whole = linear_cross_entropy(x1, w1, t, {.ignore_index = -1});
  whole.backward();
  for (int64_t chunk : {1, 4, 20, 21, 50}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    Tensor x = leaf(x0), w = leaf(w0);
    Tensor loss = linear_cross_entropy(x, w, t, {.ignore_index = -1, .chunk_rows = chunk});
    loss.backward();
    expect_all_near(loss, whole, 1e-14, 1e-14, "loss");
    expect_all_near(x.grad(), x1.grad(), 1e-14, 1e-13, "x's gradient");
    expect_all_near(w.grad(), w1.grad(), 1e-14, 1e-13, "weight's gradient");
  }
}

// The forward holds one chunk of logits at a time, then dx and dweight until the backward: its peak over the inputs
// is that, plus a few scalars, well under the (N, V) logits the composition holds. Under
// VOLT_DISABLE_KERNELS=chunked_head the composition runs, and its peak holds the whole logits.
TEST(LinearCrossEntropy, HoldsOneChunkOfLogits) {
  const int64_t n = 256, c = 8, v = 1000, chunk = 16;
  const Tensor x = leaf(rand_f64({n, c}, 46).to(DType::f32)), w = leaf(rand_f64({v, c}, 47).to(DType::f32));
  const Tensor t = targets(n, v, 4, false);
  const int64_t before = memory_stats(kCPU).allocated;
  reset_peak_memory_stats(kCPU);
  Tensor loss = linear_cross_entropy(x, w, t, {.chunk_rows = chunk});
  const int64_t peak = memory_stats(kCPU).peak_allocated - before, held = memory_stats(kCPU).allocated - before;
  const int64_t grads = (n * c + v * c) * 4, logits = n * v * 4, one_chunk = chunk * v * 4;
  std::printf("linear_cross_entropy: peak %lld bytes over the inputs, %lld held for the backward (chunk of logits "
              "%lld, gradients %lld, all logits %lld)\n",
              static_cast<long long>(peak), static_cast<long long>(held), static_cast<long long>(one_chunk),
              static_cast<long long>(grads), static_cast<long long>(logits));
  if (kernel_paths::disabled(kernel_paths::kChunkedHead)) {
    std::printf("chunked_head path off (VOLT_DISABLE_KERNELS): the composition's peak holds the logits\n");
    EXPECT_GE(peak, logits);
  } else {
    EXPECT_LE(peak, grads + one_chunk + chunk * 4 + 4096);
    EXPECT_LE(held, grads + 4096);
  }
  loss.backward();
  EXPECT_TRUE(x.grad().defined() && w.grad().defined());
}

TEST(LinearCrossEntropy, OnlyTheInputsThatNeedAGradientGetOne) {
  const Tensor x0 = rand_f64({7, 5}, 48), w0 = rand_f64({11, 5}, 49);
  const Tensor t = targets(7, 11, 0, false);
  Tensor xr = leaf(x0), wr = leaf(w0);
  cross_entropy(linear(xr, wr), t).backward();
  Tensor x = leaf(x0);
  linear_cross_entropy(x, w0, t).backward();  // a frozen head
  expect_all_near(x.grad(), xr.grad(), 1e-14, 1e-13, "x's gradient");
  Tensor w = leaf(w0);
  linear_cross_entropy(x0, w, t).backward();  // features that need no gradient
  expect_all_near(w.grad(), wr.grad(), 1e-14, 1e-13, "weight's gradient");
  NoGradGuard ng;
  Tensor loss = linear_cross_entropy(leaf(x0), leaf(w0), t);
  EXPECT_FALSE(loss.requires_grad());
  expect_all_near(loss, cross_entropy(linear(x0, w0), t), 1e-14, 1e-14, "loss without grad");
}

// No rows, and only ignored rows: a mean's loss is NaN (0 / 0, as cross_entropy's), the gradients are zero.
TEST(LinearCrossEntropy, NoCountedRowsGiveZeroGradients) {
  for (int64_t n : {0, 3}) {
    SCOPED_TRACE("rows " + std::to_string(n));
    Tensor x = leaf(rand_f64({n, 4}, 50)), w = leaf(rand_f64({6, 4}, 51));
    Tensor loss = linear_cross_entropy(x, w, full({n}, -100, DType::i64));
    EXPECT_TRUE(std::isnan(loss.item()));
    loss.backward();
    EXPECT_EQ(max(abs(w.grad())).item(), 0.0);
    if (n > 0) EXPECT_EQ(max(abs(x.grad())).item(), 0.0);
  }
}

TEST(LinearCrossEntropy, SecondBackwardIsRefused) {
  Tensor x = leaf(rand_f64({4, 3}, 52)), w = leaf(rand_f64({5, 3}, 53));
  Tensor loss = linear_cross_entropy(x, w, targets(4, 5, 1, false));
  loss.backward({}, /*retain_graph=*/true);
  VOLT_EXPECT_ERROR(loss.backward(), "second backward");  // named by linear_cross_entropy, or the fallback's classifier
}

TEST(LinearCrossEntropy, BadArgumentsNameTheProblem) {
  const Tensor x = rand_f64({4, 3}, 56), w = rand_f64({6, 3}, 57), t = targets(4, 6, 0, false);
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w, from_vector<int64_t>({0, 1, 9, 2}, {4})),
                    "target value 9 at position 2", "6 classes");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w, t.to(DType::i32)), "dtype int64", "int32");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w, targets(3, 6, 0, false)), "target has shape (3,)", "needs (4,)");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x.reshape({2, 2, 3}), w, t), "must be (N, C)", "(2, 2, 3)");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, rand_f64({6, 4}, 58), t), "x has 3 features", "(6, 4)");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w.to(DType::f32), t), "weight has dtype float32", "float64");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x.to(DType::i64), w, t), "floating point", "int64");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w, t, {.reduction = Reduction::None}), "reduction None");
  VOLT_EXPECT_ERROR(linear_cross_entropy(x, w, t, {.chunk_rows = -1}), "chunk_rows must be >= 0");
  if (cuda_device_count() > 0)
    VOLT_EXPECT_ERROR(linear_cross_entropy(x, w.to(cuda_device(0)), t), "weight is on cuda:0", "x is on cpu");
}

// CUDA against the CPU at GPT-2's vocabulary: bf16 and f16 under autocast (cuBLAS's half operands accumulated into
// the f32 weight gradient over chunks, the register-held classifier rows) and f32, each in several chunks.
TEST(LinearCrossEntropyCuda, MatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA path runs on a GPU only";
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = 96, c = 64, v = 50304;
    const Tensor x0 = rand_f64({n, c}, 54, -1, 1).to(DType::f32), w0 = rand_f64({v, c}, 55, -1, 1).to(DType::f32);
    const Tensor t = targets(n, v, 7, true);
    Tensor xc = leaf(x0), wc = leaf(w0), xg = leaf(x0.to(cuda_device(0))), wg = leaf(w0.to(cuda_device(0)));
    Tensor lc, lg;
    {
      AutocastGuard ac(dt != DType::f32, dt == DType::f32 ? DType::bf16 : dt);
      lc = linear_cross_entropy(xc, wc, t, {.ignore_index = -1, .chunk_rows = 40});
      lg = linear_cross_entropy(xg, wg, t.to(cuda_device(0)), {.ignore_index = -1, .chunk_rows = 40});
    }
    const double tol = dt == DType::f32 ? 1e-5 : 1e-3;
    expect_all_near(lg.cpu(), lc, 0, tol, "loss, CUDA vs CPU");
    mul(lc, 2.0).backward();
    mul(lg, 2.0).backward();
    ASSERT_EQ(wg.grad().dtype(), DType::f32);
    const double gx = max(abs(xc.grad())).item(), gw = max(abs(wc.grad())).item();
    const double rel = dt == DType::f32 ? 1e-5 : 2e-2;
    expect_all_near(xg.grad().cpu(), xc.grad(), rel * gx, 0, "x's gradient, CUDA vs CPU");
    expect_all_near(wg.grad().cpu(), wc.grad(), rel * gw, 0, "weight's gradient, CUDA vs CPU");
  }
}

}  // namespace
