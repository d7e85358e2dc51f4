#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>
#include <volt/runtime/cuda_api.h>

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

// ---- the checked ops clipping, the optimizers and the reducer are built on -----------------------------------

TEST(MultiTensorNorm, NormsOfAListTogether) {
  std::vector<Tensor> ts = {from_vector<float>({3, -4}), from_vector<double>({12}), Tensor(), zeros({0})};
  auto norm = [&](double p) {
    Tensor n = multi_tensor_norm(ts, p);
    EXPECT_EQ(n.dtype(), DType::f64);
    EXPECT_EQ(n.dim(), 0);
    return n.item();
  };
  EXPECT_DOUBLE_EQ(norm(2.0), 13.0);
  EXPECT_DOUBLE_EQ(norm(1.0), 19.0);
  EXPECT_DOUBLE_EQ(norm(INFINITY), 12.0);
  EXPECT_NEAR(norm(3.0), std::cbrt(27.0 + 64.0 + 1728.0), 1e-12);
  EXPECT_DOUBLE_EQ(multi_tensor_norm({}).item(), 0.0);
  // Non-contiguous inputs: the same elements give the same norm.
  Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_DOUBLE_EQ(multi_tensor_norm({m.transpose(0, 1)}, 1.0).item(), 21.0);
  // NaN propagates through every norm.
  std::vector<Tensor> with_nan = {from_vector<float>({1, NAN, 2})};
  EXPECT_TRUE(std::isnan(multi_tensor_norm(with_nan, 2.0).item()));
  EXPECT_TRUE(std::isnan(multi_tensor_norm(with_nan, INFINITY).item()));
  VOLT_EXPECT_ERROR(multi_tensor_norm({from_vector<int64_t>({1})}), "multi_tensor_norm", "tensor 0", "int64");
  VOLT_EXPECT_ERROR(multi_tensor_norm(ts, 0.0), "p must be positive");
}

TEST(MulInto, ScalesIntoAContiguousOutputInOnePass) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = zeros({3, 2});
  mul_into_(out, a.transpose(0, 1), 0.5);
  expect_close(out, {0.5, 2.0, 1.0, 2.5, 1.5, 3.0}, 0);
  Tensor wrong = zeros({6});
  VOLT_EXPECT_ERROR(mul_into_(wrong, a, 2.0), "mul_into_", "(6,)", "(2, 3)");
  Tensor strided = zeros({3, 2}).transpose(0, 1);
  VOLT_EXPECT_ERROR(mul_into_(strided, a, 2.0), "out must be contiguous");
}

TEST(FusedOptimizerOps, CheckWhatTheKernelsAssume) {
  Tensor p = from_vector<float>({1, 2}), g = from_vector<float>({2, -2});
  SgdHyper sgd;
  sgd.lr = 0.1;
  const SgdHyper sgd_plain = sgd;
  sgd_step_(p, g, Tensor(), sgd);  // plain SGD: p -= lr * g
  expect_close(p, {0.8, 2.2}, 1e-7);
  sgd.momentum = 0.9;
  VOLT_EXPECT_ERROR(sgd_step_(p, g, Tensor(), sgd), "sgd_step_", "needs a momentum_buffer");
  VOLT_EXPECT_ERROR(sgd_step_(p, g, zeros({2}, DType::f64), sgd), "momentum_buffer has dtype float64", "float32 param");
  VOLT_EXPECT_ERROR(sgd_step_(p, g, zeros({3}), sgd), "momentum_buffer is (3,)");
  VOLT_EXPECT_ERROR(sgd_step_(p, from_vector<float>({1, 2, 3}), Tensor(), SgdHyper{}), "grad is (3,)");
  Tensor pm = from_vector<float>({1, 2, 3, 4}, {2, 2}).transpose(0, 1);
  VOLT_EXPECT_ERROR(sgd_step_(pm, zeros({2, 2}), Tensor(), SgdHyper{}), "not contiguous");
  Tensor leaf = from_vector<float>({1, 2}).set_requires_grad();
  VOLT_EXPECT_ERROR(sgd_step_(leaf, g, Tensor(), SgdHyper{}), "param requires grad and grad mode is on");
  {
    NoGradGuard ng;  // as optimizers do
    sgd_step_(leaf, g, Tensor(), sgd_plain);
  }
  expect_close(leaf, {0.8, 2.2}, 1e-7);

  // A half parameter may keep f32 state; all state tensors share one dtype.
  Tensor ph = from_vector<float>({1, 2}).to(DType::bf16), gh = from_vector<float>({0.5, 0.5}).to(DType::bf16);
  AdamHyper adam;
  adam.lr = 0.1;
  adam_step_(ph, gh, zeros({2}), zeros({2}), Tensor(), adam);
  EXPECT_LT(ph.to(DType::f32).data<float>()[0], 1.0f);  // moved against the gradient
  VOLT_EXPECT_ERROR(adam_step_(ph, gh, zeros({2}), zeros({2}, DType::bf16), Tensor(), adam), "state tensors mix");
  adam.step = 0;
  VOLT_EXPECT_ERROR(adam_step_(ph, gh, zeros({2}), zeros({2}), Tensor(), adam), "step must be >= 1");
  adam.step = 1;
  adam.amsgrad = true;
  VOLT_EXPECT_ERROR(adam_step_(ph, gh, zeros({2}), zeros({2}), Tensor(), adam), "amsgrad needs max_exp_avg_sq");
}
