#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include "nn/nn.h"
#include "runtime/cuda_api.h"

using namespace volt;
using volt::testing::expect_close;

namespace {
std::vector<Tensor> params_with_grads() {
  Tensor a = zeros({2}).set_requires_grad(), b = zeros({1}, DType::f64).set_requires_grad();
  Tensor c = zeros({3}).set_requires_grad();  // no grad: ignored
  a.set_grad(from_vector<float>({3, -4}));
  b.set_grad(from_vector<double>({12}));
  return {a, b, c};
}
}  // namespace

TEST(ClipGrad, NormScalesWhenAboveMax) {
  auto ps = params_with_grads();
  double total = nn::clip_grad_norm_(ps, 6.5);
  EXPECT_NEAR(total, 13.0, 1e-12);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(ps[0].grad(), {3 * coef, -4 * coef}, 1e-6);
  expect_close(ps[1].grad(), {12 * coef}, 1e-12);
  EXPECT_FALSE(ps[2].grad().defined());
}

TEST(ClipGrad, NormLeavesSmallGradients) {
  auto ps = params_with_grads();
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0), 13.0, 1e-12);
  expect_close(ps[0].grad(), {3, -4});
  expect_close(ps[1].grad(), {12});
}

TEST(ClipGrad, OtherNorms) {
  auto ps = params_with_grads();
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, 1.0), 19.0, 1e-12);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, 3.0), std::cbrt(27.0 + 64.0 + 1728.0), 1e-9);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 6.0, INFINITY), 12.0, 1e-12);
  expect_close(ps[1].grad(), {12 * 6.0 / (12.0 + 1e-6)}, 1e-12);
  EXPECT_EQ(nn::clip_grad_norm_({zeros({1}).set_requires_grad()}, 1.0), 0.0);
  VOLT_EXPECT_ERROR(nn::clip_grad_norm_(ps, 1.0, -2.0), "norm_type");
}

TEST(ClipGrad, Value) {
  auto ps = params_with_grads();
  nn::clip_grad_value_(ps, 3.5);
  expect_close(ps[0].grad(), {3, -3.5});
  expect_close(ps[1].grad(), {3.5});
  VOLT_EXPECT_ERROR(nn::clip_grad_value_(ps, -1.0), "clip_value");
}

// ---- clip_grad_norm_no_sync_ (device ops, no host read) against the double path ----------------------------

namespace {
// Mixed f32/f64 parameters with pseudo-random gradients of several shapes (one empty, one without a grad).
std::vector<Tensor> random_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps;
  const std::vector<std::pair<Shape, DType>> specs = {
      {{7, 5}, DType::f32}, {{5}, DType::f32}, {{3, 2, 4}, DType::f64}, {{0, 3}, DType::f32}, {{1}, DType::f64}};
  for (auto& [shape, dt] : specs) {
    Tensor p = zeros(shape, dt).set_requires_grad();
    p.set_grad(mul(randn(shape, dt, kCPU, &gen), 3.0));
    ps.push_back(p);
  }
  ps.push_back(zeros({4}).set_requires_grad());  // no gradient: ignored
  return ps;
}

std::vector<double> grad_values(const Tensor& p) {
  Tensor g = p.grad().to(DType::f64).contiguous();
  const double* d = static_cast<const double*>(g.data_ptr());
  return std::vector<double>(d, d + g.numel());
}
}  // namespace

TEST(ClipGrad, NoSyncMatchesDoublePath) {
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    for (double max_norm : {1e6, 0.5}) {  // without and with clipping
      SCOPED_TRACE("p=" + std::to_string(p) + " max_norm=" + std::to_string(max_norm));
      auto a = random_params(11), b = random_params(11);
      const double want = nn::clip_grad_norm_(a, max_norm, p);
      Tensor got = nn::clip_grad_norm_no_sync_(b, max_norm, p);
      ASSERT_EQ(got.dim(), 0);
      EXPECT_EQ(got.dtype(), DType::f64);
      EXPECT_NEAR(got.item(), want, 1e-12 * want);
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].grad().defined()) {
          EXPECT_FALSE(b[i].grad().defined());
          continue;
        }
        EXPECT_EQ(b[i].grad().dtype(), a[i].grad().dtype());
        auto x = grad_values(a[i]), y = grad_values(b[i]);
        ASSERT_EQ(x.size(), y.size());
        const double tol = a[i].grad().dtype() == DType::f32 ? 1e-6 : 1e-13;
        for (size_t k = 0; k < x.size(); ++k) {
          if (max_norm > want) EXPECT_EQ(x[k], y[k]);  // no clipping: untouched in both
          else EXPECT_NEAR(y[k], x[k], tol * std::fabs(x[k]) + 1e-30);
        }
      }
      if (max_norm < want)  // the clipped gradients have norm max_norm (up to the 1e-6 and f32 rounding)
        EXPECT_NEAR(nn::clip_grad_norm_no_sync_(b, 1e6, p).item(), max_norm, 1e-5);
    }
  }
}

TEST(ClipGrad, NoSyncNaNGradient) {
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    auto a = random_params(5), b = random_params(5);
    for (auto* ps : {&a, &b}) {
      NoGradGuard ng;
      Tensor g = (*ps)[1].grad();
      g.copy_(where(eq(arange(5, DType::i64), 2.0), full({5}, NAN), g));
    }
    const double want = nn::clip_grad_norm_(a, 1.0, p);
    Tensor got = nn::clip_grad_norm_no_sync_(b, 1.0, p);
    EXPECT_TRUE(std::isnan(want));
    EXPECT_TRUE(std::isnan(got.item()));
    // NaN coefficient: every gradient becomes NaN in both (as upstream).
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].grad().defined()) continue;
      for (double v : grad_values(a[i])) EXPECT_TRUE(std::isnan(v));
      for (double v : grad_values(b[i])) EXPECT_TRUE(std::isnan(v));
    }
  }
}

TEST(ClipGrad, NoSyncEdgeCases) {
  // No gradients: a 0 on the parameters' device.
  Tensor z = nn::clip_grad_norm_no_sync_({zeros({3}).set_requires_grad()}, 1.0);
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item(), 0.0);
  EXPECT_EQ(nn::clip_grad_norm_no_sync_({}, 1.0).item(), 0.0);
  // All-zero gradients: total 0, coefficient clamped to 1, nothing changes.
  Tensor p = zeros({2}).set_requires_grad();
  p.set_grad(zeros({2}));
  EXPECT_EQ(nn::clip_grad_norm_no_sync_({p}, 1.0).item(), 0.0);
  expect_close(p.grad(), {0, 0});
  // The fixed example of NormScalesWhenAboveMax.
  auto ps = params_with_grads();
  EXPECT_NEAR(nn::clip_grad_norm_no_sync_(ps, 6.5).item(), 13.0, 1e-12);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(ps[0].grad(), {3 * coef, -4 * coef}, 1e-6);
  expect_close(ps[1].grad(), {12 * coef}, 1e-12);
  VOLT_EXPECT_ERROR(nn::clip_grad_norm_no_sync_(ps, 1.0, -2.0), "norm_type");
  VOLT_EXPECT_ERROR(nn::clip_grad_norm_no_sync_(ps, -1.0), "max_norm");
}

// On a GPU: the sync-free clipping of CUDA gradients equals the CPU double path (skipped without CUDA).
TEST(ClipGrad, NoSyncOnCudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    for (double max_norm : {1e6, 0.5}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " max_norm=" + std::to_string(max_norm));
      auto a = random_params(17), b = random_params(17);
      for (auto& q : b) {
        Tensor g = q.grad();
        q = q.detach().cuda().set_requires_grad();
        if (g.defined()) q.set_grad(g.cuda());
      }
      const double want = nn::clip_grad_norm_(a, max_norm, p);
      Tensor got = nn::clip_grad_norm_no_sync_(b, max_norm, p);
      EXPECT_TRUE(got.is_cuda());
      EXPECT_NEAR(got.item(), want, 1e-12 * want);
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].grad().defined()) continue;
        auto x = grad_values(a[i]);
        std::vector<double> y = b[i].grad().cpu().to_vector<double>();
        const double tol = a[i].grad().dtype() == DType::f32 ? 1e-6 : 1e-13;
        for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k], tol * std::fabs(x[k]) + 1e-30);
      }
      // The double-returning API on CUDA gradients: same result, one read.
      auto c = random_params(17);
      for (auto& q : c) {
        Tensor g = q.grad();
        q = q.detach().cuda().set_requires_grad();
        if (g.defined()) q.set_grad(g.cuda());
      }
      EXPECT_NEAR(nn::clip_grad_norm_(c, max_norm, p), want, 1e-12 * want);
    }
  }
}
