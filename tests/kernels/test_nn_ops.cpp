// softmax / log_softmax, cross_entropy, nll_loss, mse_loss, dropout: naive references, finite-difference
// gradients, determinism and error messages.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/graph.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {

// Softmax over `dim` of a contiguous tensor, naive.
std::vector<double> softmax_ref(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t r = shape[dim];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < r; ++k) m = std::max(m, x[(o * r + k) * inner + i]);
      for (int64_t k = 0; k < r; ++k) s += std::exp(x[(o * r + k) * inner + i] - m);
      for (int64_t k = 0; k < r; ++k) {
        double v = x[(o * r + k) * inner + i] - m;
        y[(o * r + k) * inner + i] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  return y;
}

// Per-row cross-entropy with PyTorch's label smoothing; logits (N, C, inner), target (N, inner).
// Returns per-row losses (0 for ignored rows) and the number of non-ignored rows.
std::pair<std::vector<double>, int64_t> ce_ref(const std::vector<double>& x, const std::vector<int64_t>& t,
                                               int64_t n, int64_t c, int64_t inner, int64_t ignore, double eps) {
  std::vector<double> loss;
  int64_t count = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t tgt = t[b * inner + i];
      if (tgt == ignore) { loss.push_back(0); continue; }
      ++count;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < c; ++j) m = std::max(m, x[(b * c + j) * inner + i]);
      for (int64_t j = 0; j < c; ++j) s += std::exp(x[(b * c + j) * inner + i] - m);
      double lse = m + std::log(s);
      double nll = lse - x[(b * c + tgt) * inner + i];
      double smooth = 0;
      for (int64_t j = 0; j < c; ++j) smooth += (lse - x[(b * c + j) * inner + i]) / c;
      loss.push_back((1 - eps) * nll + eps * smooth);
    }
  return {loss, count};
}

double total(const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }

}  // namespace

// ---- softmax ------------------------------------------------------------------------------------------------

TEST(Softmax, EveryDimMatchesReference) {
  Shape shape{2, 3, 4};
  Tensor x = rand_f64(shape, 11, -3, 3);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t d = 0; d < 3; ++d) {
    expect_close(softmax(x, d), softmax_ref(xv, shape, d, false), 1e-12);
    expect_close(log_softmax(x, d), softmax_ref(xv, shape, d, true), 1e-12);
  }
  expect_close(x.softmax(-1), softmax_ref(xv, shape, 2, false), 1e-12);
}

TEST(Softmax, FloatIsStableForLargeLogits) {
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000, 0, 1000}, {2, 3});
  std::vector<double> ref = softmax_ref({1000, 1001, 1002, -1000, 0, 1000}, {2, 3}, 1, false);
  expect_close(softmax(x, 1), ref, 1e-6);
  std::vector<double> lref = softmax_ref({1000, 1001, 1002, -1000, 0, 1000}, {2, 3}, 1, true);
  expect_close(log_softmax(x, 1), lref, 1e-4);
}

TEST(Softmax, NonContiguousInput) {
  Tensor base = rand_f64({4, 5}, 12);
  Tensor xt = base.t();
  std::vector<double> rv = xt.contiguous().to_vector<double>();
  expect_close(softmax(xt, 1), softmax_ref(rv, {5, 4}, 1, false), 1e-12);
  expect_close(log_softmax(xt, 0), softmax_ref(rv, {5, 4}, 0, true), 1e-12);
}

TEST(SoftmaxGrad, AllDimsAndNonContiguous) {
  Tensor x = rand_f64({2, 3, 4}, 13).set_requires_grad();
  for (int64_t d = 0; d < 3; ++d) {
    expect_gradients_match([d](const std::vector<Tensor>& in) { return softmax(in[0], d); }, {x});
    expect_gradients_match([d](const std::vector<Tensor>& in) { return log_softmax(in[0], d); }, {x});
  }
  Tensor y = rand_f64({5, 3}, 14).set_requires_grad();
  Tensor b = rand_f64({3}, 15).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return softmax(in[0].t(), 1); }, {y});
  expect_gradients_match([](const std::vector<Tensor>& in) { return log_softmax(add(in[0], in[1]), 0); }, {y, b});
}

// ---- cross entropy / nll ---------------------------------------------------------------------------------

// The online log-sum-exp shared by the CUDA softmax kernels and the attention kernels (kernels/common/softmax.h):
// -inf inputs add nothing, so a row of only -inf ends at (m, s) = (-inf, 0) instead of NaN (the guard once
// compared m == -m, which is never true for an infinity).
TEST(Softmax, OnlineLogSumExpSkipsMinusInfinity) {
  for (bool f64 : {false, true}) {
    auto run = [&](std::vector<double> xs) {
      double m = -INFINITY, s = 0;
      if (f64) {
        for (double x : xs) nnmath::lse_push(m, s, x);
      } else {
        float mf = -INFINITY, sf = 0;
        for (double x : xs) nnmath::lse_push(mf, sf, static_cast<float>(x));
        m = mf;
        s = sf;
      }
      return std::pair<double, double>{m, s};
    };
    auto [m0, s0] = run({-INFINITY, -INFINITY, -INFINITY});
    EXPECT_EQ(m0, -INFINITY);
    EXPECT_EQ(s0, 0.0);
    EXPECT_EQ(nnmath::lse_finish(m0, s0), -INFINITY);
    // -inf before, between and after finite values contributes exp(-inf) = 0.
    auto [m1, s1] = run({-INFINITY, 1.0, -INFINITY, 3.0, -INFINITY});
    EXPECT_EQ(m1, 3.0);
    EXPECT_NEAR(s1, 1.0 + std::exp(-2.0), 1e-6);
    EXPECT_NEAR(nnmath::lse_finish(m1, s1), std::log(std::exp(1.0) + std::exp(3.0)), 1e-6);
  }
}

// The CUDA kernels split a row over threads and merge the threads' states in a tree (kernels/cuda/block_lse.cuh);
// the CPU pushes the whole row into one state. Both must end at the same log-sum-exp, NaN and infinities included.
TEST(Softmax, MergedLogSumExpStatesEqualOnePass) {
  auto one_pass = [](const std::vector<float>& xs) {
    float m = -INFINITY, s = 0;
    for (float x : xs) nnmath::lse_push(m, s, x);
    return nnmath::lse_finish(m, s);
  };
  // `threads` states, element k to state k % threads, then the block's halving tree merge.
  auto merged = [](const std::vector<float>& xs, int threads) {
    std::vector<float> m(threads, -INFINITY), s(threads, 0.f);
    for (size_t k = 0; k < xs.size(); ++k) nnmath::lse_push(m[k % threads], s[k % threads], xs[k]);
    for (int half = threads / 2; half > 0; half /= 2)
      for (int t = 0; t < half; ++t) nnmath::lse_merge(m[t], s[t], m[t + half], s[t + half]);
    return nnmath::lse_finish(m[0], s[0]);
  };
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<std::vector<float>> rows{
      {1.f, 2.f, 3.f, -1.f, 0.5f},  {1.f, nan},           {nan, 1.f},        {5.f, nan, 1.f, 2.f},
      {inf, 1.f, inf},              {inf, inf, inf, inf}, {-inf, -inf, 2.f}, {-inf, -inf, -inf, -inf},
      {1.f, nan, inf, 2.f},         {-inf, nan},          {3.f, inf},
  };
  for (const auto& row : rows) {
    const float want = one_pass(row);
    for (int threads : {2, 4, 8}) {
      const float got = merged(row, threads);
      SCOPED_TRACE(::testing::PrintToString(row) + " over " + std::to_string(threads) + " states");
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << got;
      } else if (std::isinf(want)) {
        EXPECT_EQ(got, want);
      } else {
        EXPECT_NEAR(got, want, 1e-6f * std::abs(want) + 1e-6f);
      }
    }
  }
  EXPECT_TRUE(std::isnan(one_pass({1.f, nan})));  // the CPU reference itself propagates NaN
  EXPECT_EQ(one_pass({inf, 1.f, inf}), inf);
}

TEST(CrossEntropy, MatchesReferenceAllReductionsAndSmoothing) {
  const int64_t n = 6, c = 5;
  Tensor x = rand_f64({n, c}, 21, -2, 2);
  std::vector<int64_t> tv{0, 4, 2, 2, 1, 3};
  Tensor t = from_vector<int64_t>(tv, {n});
  for (double eps : {0.0, 0.1, 1.0}) {
    auto [rows, cnt] = ce_ref(x.to_vector<double>(), tv, n, c, 1, -100, eps);
    expect_close(cross_entropy(x, t, Reduction::None, -100, eps), rows, 1e-12);
    EXPECT_NEAR(cross_entropy(x, t, Reduction::Sum, -100, eps).item(), total(rows), 1e-12);
    EXPECT_NEAR(cross_entropy(x, t, Reduction::Mean, -100, eps).item(), total(rows) / cnt, 1e-12);
  }
}

TEST(CrossEntropy, IgnoreIndexMeanDividesByNonIgnored) {
  const int64_t n = 5, c = 4;
  Tensor x = rand_f64({n, c}, 22);
  std::vector<int64_t> tv{1, -100, 3, -100, 0};
  Tensor t = from_vector<int64_t>(tv, {n});
  auto [rows, cnt] = ce_ref(x.to_vector<double>(), tv, n, c, 1, -100, 0.2);
  ASSERT_EQ(cnt, 3);
  EXPECT_NEAR(cross_entropy(x, t, Reduction::Mean, -100, 0.2).item(), total(rows) / 3, 1e-12);
  expect_close(cross_entropy(x, t, Reduction::None, -100, 0.2), rows, 1e-12);
  // A custom ignore_index value that is a valid class.
  std::vector<int64_t> tv2{1, 2, 3, 2, 0};
  auto [rows2, cnt2] = ce_ref(x.to_vector<double>(), tv2, n, c, 1, 2, 0.0);
  EXPECT_NEAR(cross_entropy(x, from_vector<int64_t>(tv2, {n}), Reduction::Mean, 2).item(), total(rows2) / cnt2,
              1e-12);
  // All ignored: the mean is 0/0.
  EXPECT_TRUE(std::isnan(cross_entropy(x, full({n}, -100, DType::i64)).item()));
}

TEST(CrossEntropy, SpatialTargets) {
  const int64_t n = 2, c = 3, h = 2, w = 2;
  Tensor x = rand_f64({n, c, h, w}, 23);
  std::vector<int64_t> tv{0, 2, 1, -100, 2, 2, 0, 1};
  Tensor t = from_vector<int64_t>(tv, {n, h, w});
  auto [rows, cnt] = ce_ref(x.to_vector<double>(), tv, n, c, h * w, -100, 0.1);
  Tensor none = cross_entropy(x, t, Reduction::None, -100, 0.1);
  EXPECT_EQ(none.shape(), (Shape{n, h, w}));
  expect_close(none, rows, 1e-12);
  EXPECT_NEAR(cross_entropy(x, t, Reduction::Mean, -100, 0.1).item(), total(rows) / cnt, 1e-12);
}

TEST(CrossEntropy, Float32BatchShapes) {
  for (int64_t n : {16, 256}) {
    Generator g(n);
    Tensor x = rand({n, 10}, DType::f32, kCPU, &g, -4, 4);
    std::vector<int64_t> tv;
    for (int64_t i = 0; i < n; ++i) tv.push_back((i * 7) % 10);
    Tensor t = from_vector<int64_t>(tv, {n});
    auto [rows, cnt] = ce_ref(x.to_vector<double>(), tv, n, 10, 1, -100, 0.0);
    Tensor loss = cross_entropy(x, t);
    EXPECT_EQ(loss.dtype(), DType::f32);
    EXPECT_NEAR(loss.item(), total(rows) / cnt, 1e-5);
  }
}

TEST(CrossEntropy, EqualsNllOfLogSoftmax) {
  Tensor x = rand_f64({4, 6}, 24);
  Tensor t = from_vector<int64_t>({5, 0, 3, 3}, {4});
  EXPECT_NEAR(cross_entropy(x, t).item(), nll_loss(log_softmax(x, 1), t).item(), 1e-12);
  Tensor lp = log_softmax(x, 1);
  std::vector<double> lv = lp.to_vector<double>();
  expect_close(nll_loss(lp, t, Reduction::None), {-lv[5], -lv[6], -lv[15], -lv[21]}, 1e-12);
  EXPECT_NEAR(nll_loss(lp, t, Reduction::Sum).item(), -(lv[5] + lv[6] + lv[15] + lv[21]), 1e-12);
  EXPECT_NEAR(nll_loss(lp, from_vector<int64_t>({5, -100, 3, -100}, {4})).item(), -(lv[5] + lv[15]) / 2, 1e-12);
}

TEST(CrossEntropyGrad, FusedBackwardMatchesFiniteDifferences) {
  Tensor x = rand_f64({4, 5}, 25, -2, 2).set_requires_grad();
  Tensor t = from_vector<int64_t>({1, -100, 4, 0}, {4});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
    for (double eps : {0.0, 0.3}) {
      expect_gradients_match([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, r, -100, eps); },
                             {x});
    }
  // softmax - onehot, exactly, for the plain sum.
  x.set_grad(Tensor());
  Tensor t2 = from_vector<int64_t>({1, 2, 4, 0}, {4});
  cross_entropy(x, t2, Reduction::Sum).backward();
  std::vector<double> p = softmax(x.detach(), 1).to_vector<double>();
  std::vector<int64_t> tv{1, 2, 4, 0};
  for (int64_t i = 0; i < 4; ++i) p[i * 5 + tv[i]] -= 1;
  expect_close(x.grad(), p, 1e-12);
}

TEST(CrossEntropyGrad, SpatialNonContiguousAndNll) {
  Tensor x = rand_f64({2, 3, 4}, 26).set_requires_grad();
  Tensor t = from_vector<int64_t>({0, 1, 2, -100, 2, 2, 1, 0}, {2, 4});
  expect_gradients_match([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, Reduction::Mean, -100, 0.1); },
                         {x});
  // Logits (N, C) built by transposing a (C, N) leaf.
  Tensor y = rand_f64({5, 3}, 27).set_requires_grad();
  Tensor ty = from_vector<int64_t>({4, 0, 2}, {3});
  expect_gradients_match([&](const std::vector<Tensor>& in) { return cross_entropy(in[0].t(), ty); }, {y});
  expect_gradients_match([&](const std::vector<Tensor>& in) { return nll_loss(in[0].t(), ty, Reduction::Sum); }, {y});
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return nll_loss(log_softmax(in[0], 1), t, Reduction::None); }, {x});
}

TEST(CrossEntropyErrors, TargetDtypeShapeRangeAndArgs) {
  Tensor x = zeros({4, 3});
  VOLT_EXPECT_ERROR(cross_entropy(x, zeros({4}, DType::i32)), "cross_entropy", "target", "int64", "int32");
  VOLT_EXPECT_ERROR(cross_entropy(x, zeros({4}, DType::f32)), "cross_entropy", "int64");
  VOLT_EXPECT_ERROR(cross_entropy(x, zeros({3}, DType::i64)), "cross_entropy", "(3,)", "(4, 3)", "(4,)");
  VOLT_EXPECT_ERROR(cross_entropy(x, from_vector<int64_t>({0, 1, 7, 2}, {4})), "cross_entropy", "7",
                    "out of range", "3 classes");
  VOLT_EXPECT_ERROR(cross_entropy(x, from_vector<int64_t>({0, -1, 1, 2}, {4})), "cross_entropy", "-1");
  VOLT_EXPECT_ERROR(cross_entropy(x, zeros({4}, DType::i64), Reduction::Mean, -100, 1.5), "label_smoothing", "1.5");
  VOLT_EXPECT_ERROR(cross_entropy(zeros({4}, DType::i64), zeros({}, DType::i64)), "cross_entropy", "floating");
  VOLT_EXPECT_ERROR(nll_loss(zeros({2, 3, 5}), zeros({2, 3}, DType::i64)), "nll_loss", "(2, 5)");
  VOLT_EXPECT_ERROR(nll_loss(x, from_vector<int64_t>({0, 3, 1, 1}, {4})), "nll_loss", "3", "out of range");
}

// A captured CPU graph replays the loss kernels on whatever the target tensor holds then: the kernels check the
// targets themselves, so a bad one throws at the replay, naming the op, the position and the value (the classifier
// used to read outside its row there, and cross_entropy to return NaN).
TEST(CrossEntropy, CapturedLossChecksTheTargetsOfEachReplay) {
  Tensor x = rand_f64({3, 4}, 3);
  Tensor t = from_vector<int64_t>({0, 1, 2});
  Graph g(kCPU);
  g.capture_begin();
  Tensor ce = cross_entropy(x, t);
  Tensor fused = fused_cross_entropy(x, t);
  g.capture_end();
  t.copy_(from_vector<int64_t>({3, -100, 1}));
  ASSERT_TRUE(g.replay());
  const double want = cross_entropy(x, from_vector<int64_t>({3, -100, 1})).item();
  EXPECT_DOUBLE_EQ(ce.item(), want);
  EXPECT_NEAR(fused.item(), want, 1e-15);
  t.copy_(from_vector<int64_t>({0, 4, 2}));
  VOLT_EXPECT_ERROR(g.replay(), "cross_entropy: target value 4 at position 1", "4 classes");
}

// On a GPU the class-target losses check the targets in their kernels (a host check would wait for the device at
// every step): a bad target gives its row a NaN loss, and the device's next synchronisation reports the op, the
// position and the value, once; linear_cross_entropy names the position in the whole target, not in its chunk.
// The classifier's row kernel (bf16 rows of 50304 logits) and its block kernel (3 classes) both check.
TEST(ClassTargetsCuda, BadTargetIsReportedAtTheNextSynchronisation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA loss kernels run on a GPU only";
  const Device dev = cuda_device(0);
  Tensor x = rand_f64({4, 3}, 5).to(DType::f32).to(dev).set_requires_grad();
  Tensor bad = from_vector<int64_t>({0, 1, 7, -100}).to(dev);
  Tensor ce = cross_entropy(x, bad);
  VOLT_EXPECT_ERROR(synchronize(dev), "cross_entropy: target value 7 at position 2", "3 classes", "ignore_index",
                    "next synchronisation");
  EXPECT_NO_THROW(synchronize(dev));
  EXPECT_TRUE(std::isnan(ce.item()));
  ce.backward();
  VOLT_EXPECT_ERROR(x.grad().to(kCPU), "cross_entropy: target value 7 at position 2");
  std::vector<float> g = x.grad().to(kCPU).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_EQ(std::isnan(g[i]), i >= 6 && i < 9) << "gradient element " << i;  // only row 2's is NaN

  Tensor nll = nll_loss(log_softmax(x.detach(), 1), bad, Reduction::Sum);
  VOLT_EXPECT_ERROR(nll.item(), "nll_loss: target value 7 at position 2");
  Tensor fused = fused_cross_entropy(x.detach(), bad);
  VOLT_EXPECT_ERROR(fused.item(), "fused_cross_entropy: target value 7 at position 2", "3 classes");
  LinearCrossEntropyOptions chunks;
  chunks.chunk_rows = 2;  // row 2 is row 0 of the second chunk
  Tensor head = linear_cross_entropy(rand_f64({4, 5}, 6).to(DType::f32).to(dev),
                                     rand_f64({3, 5}, 7).to(DType::f32).to(dev), bad, chunks);
  // (With VOLT_DISABLE_KERNELS=chunked_head the op is fused_cross_entropy over the whole logits, and says so.)
  VOLT_EXPECT_ERROR(head.item(), "cross_entropy: target value 7 at position 2", "3 classes");

  Tensor wide = rand_f64({2, 50304}, 8).to(DType::bf16).to(dev);
  Tensor row_kernel = fused_cross_entropy(wide, from_vector<int64_t>({3, 50304}).to(dev));
  VOLT_EXPECT_ERROR(row_kernel.item(), "fused_cross_entropy: target value 50304 at position 1", "50304 classes");
  EXPECT_TRUE(std::isnan(row_kernel.item()));
  EXPECT_TRUE(std::isfinite(fused_cross_entropy(wide, from_vector<int64_t>({3, 50303}).to(dev)).item()));
}

// ---- mse ----------------------------------------------------------------------------------------------------

TEST(MseLoss, ValuesGradientsAndErrors) {
  Tensor a = rand_f64({3, 4}, 31).set_requires_grad();
  Tensor b = rand_f64({3, 4}, 32).set_requires_grad();
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), sq;
  for (size_t i = 0; i < av.size(); ++i) sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
  expect_close(mse_loss(a, b, Reduction::None), sq, 1e-12);
  EXPECT_NEAR(mse_loss(a, b, Reduction::Sum).item(), total(sq), 1e-12);
  EXPECT_NEAR(mse_loss(a, b).item(), total(sq) / 12, 1e-12);
  expect_gradients_match([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); }, {a, b});
  expect_gradients_match([](const std::vector<Tensor>& in) { return mse_loss(in[0].t(), in[1].t(), Reduction::None); },
                         {a, b});
  VOLT_EXPECT_ERROR(mse_loss(zeros({3, 1}), zeros({3})), "mse_loss", "(3, 1)", "(3,)");
}

// ---- dropout ------------------------------------------------------------------------------------------------

TEST(Dropout, SameSeedSameMaskAndMatchesRandStream) {
  Tensor x = ones({1000});
  Generator g1(77), g2(77);
  Tensor y1 = dropout(x, 0.3, true, &g1);
  Tensor y2 = dropout(x, 0.3, true, &g2);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
  // The next call on the same generator draws a different mask.
  Tensor y3 = dropout(x, 0.3, true, &g1);
  EXPECT_NE(y1.to_vector<float>(), y3.to_vector<float>());
  EXPECT_EQ(g1.offset(), 2u * 250u);
  // keep_i == (rand_with_seed(seed, offset)[i] >= p)
  std::vector<float> u = rand_with_seed({1000}, 77, 0).to_vector<float>();
  std::vector<float> v = y1.to_vector<float>();
  for (size_t i = 0; i < u.size(); ++i) EXPECT_EQ(v[i] != 0.0f, u[i] >= 0.3f) << i;
}

TEST(Dropout, IdentityWhenEvalOrZeroP) {
  Tensor x = rand_f64({10}, 41);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
}

TEST(Dropout, ScalingAndExpectedFraction) {
  const double p = 0.25;
  Generator g(5);
  Tensor x = full({20000}, 2.0);
  std::vector<float> y = dropout(x, p, true, &g).to_vector<float>();
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0) {
      ++kept;
      EXPECT_FLOAT_EQ(v, static_cast<float>(2.0 / (1 - p)));
    }
  }
  double frac = static_cast<double>(kept) / y.size();
  EXPECT_NEAR(frac, 1 - p, 0.015);  // ~5 standard deviations
  Generator g1(6);
  std::vector<float> all = dropout(x, 1.0, true, &g1).to_vector<float>();
  for (float v : all) ASSERT_EQ(v, 0.0f);
}

TEST(DropoutGrad, MaskIsSavedAndGradientMatches) {
  Tensor x = rand_f64({6, 5}, 42).set_requires_grad();
  // Re-seed on every call so finite differences see the same mask.
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        Generator g(9);
        return dropout(in[0], 0.4, true, &g);
      },
      {x});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        Generator g(10);
        return dropout(in[0].t(), 0.5, true, &g);
      },
      {x});
  x.set_grad(Tensor());
  Generator g(11);
  Tensor y = dropout(x, 0.5, true, &g);
  y.sum().backward();
  std::vector<double> yv = y.to_vector<double>(), gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_DOUBLE_EQ(gv[i], yv[i] != 0 ? 2.0 : 0.0);
}

TEST(DropoutErrors, BadProbability) {
  VOLT_EXPECT_ERROR(dropout(ones({3}), 1.5, true), "dropout", "p", "1.5");
  VOLT_EXPECT_ERROR(dropout(ones({3}), -0.1, true), "dropout", "-0.1");
  VOLT_EXPECT_ERROR(softmax(ones({3}), 1), "softmax");
  VOLT_EXPECT_ERROR(log_softmax(ones({2, 3}), -3), "log_softmax");
}

// ---- low precision and CPU/CUDA parity ----------------------------------------------------------------------

TEST(NnLowPrecision, HalfAndBFloat16ComputeInFloat) {
  Generator g(50);
  Tensor x = rand({8, 7}, DType::f32, kCPU, &g, -3, 3);
  Tensor t = from_vector<int64_t>({0, 6, 3, 3, 2, 1, 5, 4}, {8});
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor xl = x.to(dt);
    Tensor ref_in = xl.to(DType::f32);  // same rounded inputs, float math
    Tensor ce = cross_entropy(xl, t, Reduction::Mean, -100, 0.1);
    EXPECT_EQ(ce.dtype(), dt);
    EXPECT_NEAR(ce.item(), cross_entropy(ref_in, t, Reduction::Mean, -100, 0.1).item(), 2e-2);
    std::vector<double> sm = softmax(ref_in, 1).to_vector<double>();
    expect_close(softmax(xl, 1), sm, 1e-2, 1e-2);
    Tensor xg = xl.detach().set_requires_grad();
    cross_entropy(xg, t, Reduction::Sum).backward();
    Tensor rg = ref_in.detach().set_requires_grad();
    cross_entropy(rg, t, Reduction::Sum).backward();
    EXPECT_EQ(xg.grad().dtype(), dt);
    expect_close(xg.grad(), rg.grad().to_vector<double>(), 1e-2, 1e-2);
  }
}

TEST(NnCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator g(60);
  Tensor x = rand({6, 5, 3}, DType::f32, kCPU, &g, -3, 3);
  Tensor xd = x.cuda();
  for (int64_t d = 0; d < 3; ++d) {
    expect_close(softmax(xd, d).cpu(), softmax(x, d).to_vector<double>(), 1e-6);
    expect_close(log_softmax(xd, d).cpu(), log_softmax(x, d).to_vector<double>(), 1e-5);
    expect_close(argmax(xd, d).cpu(), argmax(x, d).to_vector<double>(), 0);
    expect_close(max(xd, d).first.cpu(), max(x, d).first.to_vector<double>(), 0);
    expect_close(min(xd, d).second.cpu(), min(x, d).second.to_vector<double>(), 0);
  }
  Tensor big = rand({3, 1000}, DType::f32, kCPU, &g);  // the block-per-output arg-reduction path
  expect_close(argmax(big.cuda(), 1).cpu(), argmax(big, 1).to_vector<double>(), 0);
  EXPECT_EQ(max(big.cuda()).item(), max(big).item());
  Tensor t = from_vector<int64_t>({0, 4, -100, 2, 1, 3, 4, 0, 1, 2, 3, -100, 0, 0, 4, 1, 2, 3}, {6, 3});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor a = x.detach().set_requires_grad(), b = xd.detach().set_requires_grad();
    Tensor la = cross_entropy(a, t, r, -100, 0.1), lb = cross_entropy(b, t.cuda(), r, -100, 0.1);
    expect_close(lb.cpu(), la.to_vector<double>(), 1e-5);
    la.sum().backward();
    lb.sum().backward();
    expect_close(b.grad().cpu(), a.grad().to_vector<double>(), 1e-6);
    Tensor lp = log_softmax(x, 1);
    expect_close(nll_loss(lp.cuda(), t.cuda(), r).cpu(), nll_loss(lp, t, r).to_vector<double>(), 1e-5);
  }
  // The same dropout mask on both devices for the same (seed, offset).
  Generator g1(70), g2(70);
  Tensor ones1 = ones({1001});
  expect_close(dropout(ones1.cuda(), 0.3, true, &g1).cpu(), dropout(ones1, 0.3, true, &g2).to_vector<double>(), 0);
  Tensor dg = ones({4, 5}).cuda().set_requires_grad();
  Generator g3(71);
  Tensor y = dropout(dg, 0.5, true, &g3);
  y.sum().backward();
  expect_close(dg.grad().cpu(), y.detach().cpu().to_vector<double>(), 0);
  EXPECT_NEAR(var(xd, {1}).cpu().to_vector<double>()[0], var(x, {1}).to_vector<double>()[0], 1e-5);
}
