// autograd::grad, create_graph and second derivatives (kernels/grad.h).
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include "common/second_order.h"
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>

namespace volt {
namespace {

using testing::rand_f64;

Tensor scalar_f64(double v) { return full({}, v, DType::f64, kCPU).set_requires_grad(true); }

TEST(Grad, ReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = rand_f64({3}, 1).set_requires_grad(true);
  Tensor y = rand_f64({3}, 2).set_requires_grad(true);
  Tensor loss = sum(mul(mul(x, x), y));  // d/dx = 2 x y, d/dy = x^2
  std::vector<Tensor> g = autograd::grad({loss}, {x, y});
  ASSERT_EQ(g.size(), 2u);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  std::vector<double> gx = g[0].to_vector<double>(), gy = g[1].to_vector<double>();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(gx[i], 2 * xv[i] * yv[i]);
    EXPECT_DOUBLE_EQ(gy[i], xv[i] * xv[i]);
  }
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
  EXPECT_FALSE(g[0].requires_grad()) << "without create_graph the gradient carries no graph";
}

TEST(Grad, OnlyTheRequestedInputsAndNoAccumulatorRuns) {
  Tensor w = rand_f64({2, 3}, 3).set_requires_grad(true);
  Tensor x = rand_f64({4, 2}, 4).set_requires_grad(true);
  Tensor loss = sum(tanh(matmul(x, w)));
  Tensor gx = autograd::grad(loss, x, Tensor(), {.retain_graph = true});
  EXPECT_EQ(gx.shape(), x.shape());
  EXPECT_FALSE(w.grad().defined()) << "w's accumulator must not run when only x's gradient is asked for";
  // The same value as a full backward.
  loss.backward();
  std::vector<double> a = gx.to_vector<double>(), b = x.grad().to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i], b[i]);
}

TEST(Grad, NonLeafInputGetsTheGradientReachingIt) {
  Tensor x = rand_f64({5}, 5).set_requires_grad(true);
  Tensor h = mul(x, 3.0);
  Tensor loss = sum(exp(h));
  Tensor gh = autograd::grad(loss, h);  // d/dh sum(exp(h)) = exp(h)
  std::vector<double> hv = h.to_vector<double>(), g = gh.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], std::exp(hv[i]));
}

TEST(Grad, GradOutputsWeightNonScalarOutputs) {
  Tensor x = rand_f64({3}, 6).set_requires_grad(true);
  Tensor y = mul(x, x);
  Tensor v = rand_f64({3}, 7);
  Tensor gx = autograd::grad(y, x, v);  // v * 2x
  std::vector<double> xv = x.to_vector<double>(), vv = v.to_vector<double>(), g = gx.to_vector<double>();
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(g[i], 2 * xv[i] * vv[i]);
  Tensor y2 = mul(x, x);
  try {
    autograd::grad(y2, x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one-element output"), std::string::npos) << e.what();
  }
}

TEST(Grad, UnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = rand_f64({2}, 8).set_requires_grad(true);
  Tensor z = rand_f64({2}, 9).set_requires_grad(true);
  Tensor loss = sum(square(x));
  try {
    autograd::grad({loss}, {x, z}, {}, {.retain_graph = true});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 (shape (2,)) is not used"), std::string::npos) << e.what();
  }
  std::vector<Tensor> g = autograd::grad({loss}, {x, z}, {}, {.retain_graph = true, .allow_unused = true});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  g = autograd::grad({loss}, {x, z}, {}, {.materialize_grads = true});
  ASSERT_TRUE(g[1].defined());
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{0.0, 0.0}));
}

TEST(Grad, InputThatDoesNotRequireGradIsNamed) {
  Tensor x = rand_f64({2}, 10).set_requires_grad(true);
  Tensor c = rand_f64({2}, 11);
  Tensor loss = sum(mul(x, c));
  try {
    autograd::grad(loss, c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 0 (shape (2,)) does not require grad"), std::string::npos) << e.what();
  }
}

TEST(Grad, GraphIsFreedUnlessRetained) {
  Tensor x = rand_f64({3}, 12).set_requires_grad(true);
  Tensor loss = sum(exp(x));
  autograd::grad(loss, x);
  EXPECT_THROW(autograd::grad(loss, x), Error) << "the graph was freed by the first call";
  Tensor loss2 = sum(exp(x));
  Tensor a = autograd::grad(loss2, x, Tensor(), {.retain_graph = true});
  Tensor b = autograd::grad(loss2, x);
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
}

TEST(Grad, SecondDerivativeOfAPolynomial) {
  Tensor x = scalar_f64(1.5);
  Tensor y = mul(pow(x, 3.0), 2.0);  // y = 2 x^3: y' = 6 x^2, y'' = 12 x, y''' = 12
  Tensor d1 = autograd::grad(y, x, Tensor(), {.create_graph = true});
  EXPECT_TRUE(d1.requires_grad());
  EXPECT_NEAR(d1.item(), 6 * 1.5 * 1.5, 1e-12);
  Tensor d2 = autograd::grad(d1, x, Tensor(), {.create_graph = true});
  EXPECT_NEAR(d2.item(), 12 * 1.5, 1e-12);
  Tensor d3 = autograd::grad(d2, x);
  EXPECT_NEAR(d3.item(), 12.0, 1e-12);
}

TEST(Grad, ThirdDerivativeThroughSavedOutputs) {
  // tanh'(x) = 1 - t^2, tanh''(x) = -2 t (1 - t^2), tanh'''(x) = (6 t^2 - 2)(1 - t^2)
  Tensor x = scalar_f64(0.7);
  Tensor d1 = autograd::grad(tanh(x), x, Tensor(), {.create_graph = true});
  Tensor d2 = autograd::grad(d1, x, Tensor(), {.create_graph = true});
  Tensor d3 = autograd::grad(d2, x);
  const double t = std::tanh(0.7);
  EXPECT_NEAR(d1.item(), 1 - t * t, 1e-14);
  EXPECT_NEAR(d2.item(), -2 * t * (1 - t * t), 1e-14);
  EXPECT_NEAR(d3.item(), (6 * t * t - 2) * (1 - t * t), 1e-14);
  // exp and sigmoid keep their outputs the same way.
  Tensor e2 = autograd::grad(autograd::grad(exp(x), x, Tensor(), {.create_graph = true}), x);
  EXPECT_NEAR(e2.item(), std::exp(0.7), 1e-14);
  const double s = 1 / (1 + std::exp(-0.7));
  Tensor s2 = autograd::grad(autograd::grad(sigmoid(x), x, Tensor(), {.create_graph = true}), x);
  EXPECT_NEAR(s2.item(), s * (1 - s) * (1 - 2 * s), 1e-14);
}

TEST(Grad, HessianVectorProductOfAQuadratic) {
  // f(x) = 0.5 x^T A x with symmetric A: H = A, so H v = A v.
  Tensor m = rand_f64({4, 4}, 13);
  Tensor a = add(m, m.transpose(0, 1));
  Tensor x = rand_f64({4}, 14).set_requires_grad(true);
  Tensor v = rand_f64({4}, 15);
  Tensor f = mul(sum(mul(x, matmul(a, x))), 0.5);
  Tensor g = autograd::grad(f, x, Tensor(), {.create_graph = true});
  Tensor hv = autograd::grad(sum(mul(g, v)), x);
  Tensor expect = matmul(a, v);
  std::vector<double> got = hv.to_vector<double>(), want = expect.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
}

TEST(Grad, GradientPenaltyOfAnMlpMatchesFiniteDifferences) {
  // WGAN-GP's penalty: (||d critic / d x|| - 1)^2, differentiated with respect to the critic's weights. With a
  // leaky ReLU the input gradient is piecewise constant in the hidden bias, so only the weights are checked there;
  // with tanh every parameter, the bias included, has a second-order path.
  Tensor w1 = rand_f64({8, 3}, 16).set_requires_grad(true);
  Tensor b1 = rand_f64({8}, 17).set_requires_grad(true);
  Tensor w2 = rand_f64({1, 8}, 18).set_requires_grad(true);
  Tensor x0 = rand_f64({5, 3}, 19);
  for (bool smooth : {false, true}) {
    auto penalty = [&](const std::vector<Tensor>& p) {
      EnableGradGuard grad_on;  // the finite differences evaluate under NoGradGuard; the penalty needs a graph
      Tensor x = x0.detach().clone().set_requires_grad(true);
      Tensor h = linear(x, p[0], smooth ? p[2] : b1.detach());
      Tensor critic = linear(smooth ? tanh(h) : leaky_relu(h, 0.2), p[1]);
      Tensor gx = autograd::grad(sum(critic), x, Tensor(), {.create_graph = true});
      Tensor norm = sqrt(sum(square(gx), {1}));
      return mean(square(sub(norm, 1.0)));
    };
    std::vector<Tensor> params{w1, w2};
    if (smooth) params.push_back(b1);
    SCOPED_TRACE(smooth ? "tanh critic" : "leaky ReLU critic");
    testing::expect_gradients_match(penalty, params, 1e-6, 1e-8, 1e-6);
  }
}

TEST(Grad, PdeResidualUsesSecondDerivativesOfTheOutput) {
  // u(x) = MLP(x) with tanh; u''(x) from two grad calls against central differences of u.
  Tensor w1 = rand_f64({16, 1}, 20), b1 = rand_f64({16}, 21), w2 = rand_f64({1, 16}, 22);
  auto u = [&](const Tensor& x) { return linear(tanh(linear(x, w1, b1)), w2); };
  Tensor x = rand_f64({6, 1}, 23).set_requires_grad(true);
  Tensor ux = autograd::grad(sum(u(x)), x, Tensor(), {.create_graph = true});
  Tensor uxx = autograd::grad(sum(ux), x);
  const double h = 1e-4;
  std::vector<double> xs = x.to_vector<double>(), got = uxx.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    NoGradGuard ng;
    auto at = [&](double v) { return u(full({1, 1}, v, DType::f64, kCPU)).item(); };
    double fd = (at(xs[i] + h) - 2 * at(xs[i]) + at(xs[i] - h)) / (h * h);
    EXPECT_NEAR(got[i], fd, 1e-6) << "x = " << xs[i];
  }
}

TEST(Grad, BackwardWithCreateGraphLeavesDifferentiableGrads) {
  Tensor x = scalar_f64(2.0);
  autograd::backward({pow(x, 3.0)}, {}, std::nullopt, /*create_graph=*/true);
  Tensor gx = x.grad();  // 3 x^2 = 12, with a graph
  ASSERT_TRUE(gx.requires_grad());
  EXPECT_DOUBLE_EQ(gx.item(), 12.0);
  Tensor g2 = autograd::grad(gx, x);  // 6 x = 12
  EXPECT_DOUBLE_EQ(g2.item(), 12.0);
}

TEST(Grad, NonDifferentiableFormulaThrowsNamingTheOpOnlyWhenDifferentiatedAgain) {
  // A custom op attached with autograd::attach (its formula uses a value computed outside the graph) gives the
  // right first gradient under create_graph; differentiating that gradient again names the op instead of
  // silently treating the formula as constant.
  auto cube = [](const Tensor& x) {
    Tensor out = mul(mul(x, x), x).detach();
    Tensor x2 = mul(x, x).detach();
    autograd::attach(out, "MyCubeBackward", {x}, [x2](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(g[0], mul(x2, 3.0))};
    });
    return out;
  };
  Tensor x = rand_f64({4}, 24).set_requires_grad(true);
  Tensor g = autograd::grad(sum(cube(x)), x, Tensor(), {.create_graph = true});
  std::vector<double> xv = x.to_vector<double>(), gv = g.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(gv[i], 3 * xv[i] * xv[i], 1e-14);
  EXPECT_TRUE(g.requires_grad()) << "the gradient must stay tied to the graph, not become a constant";
  try {
    autograd::grad(sum(g), x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second derivative through MyCube is not implemented"), std::string::npos)
        << e.what();
  }
  // Built-in fused ops have differentiable formulas: layer_norm's second derivative exists.
  Tensor w = rand_f64({4}, 25).set_requires_grad(true);
  Tensor xm = rand_f64({2, 4}, 26).set_requires_grad(true);
  Tensor y = layer_norm(xm, {4}, w, Tensor(), 1e-5);
  Tensor gx = autograd::grad(sum(mul(y, y)), xm, Tensor(), {.create_graph = true});
  EXPECT_TRUE(autograd::grad(sum(gx), w).defined());
}

TEST(Grad, SecondDerivativesOfCompositions) {
  // Mixed second derivatives of a small network, every input differentiated.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor h = gelu(add(matmul(in[0], in[1]), in[2]));
    return log_softmax(mul(silu(h), sigmoid(h)), 1);
  };
  testing::expect_second_derivatives_match(f, {rand_f64({3, 4}, 26).set_requires_grad(true),
                                               rand_f64({4, 5}, 27).set_requires_grad(true),
                                               rand_f64({5}, 28).set_requires_grad(true)});
}

TEST(Grad, NodesOffThePathToTheInputsDoNotRun) {
  // A branch whose only input does not lead to x: its formula must not run (it would throw here).
  Tensor x = rand_f64({3}, 29).set_requires_grad(true);
  Tensor other = rand_f64({3}, 30).set_requires_grad(true);
  int runs = 0;
  Tensor side = mul(other, 1.0);
  Tensor side_out = side.detach().clone();
  autograd::attach(side_out, "CountingBackward", {side}, [&runs](const std::vector<Tensor>& g) {
    ++runs;
    return std::vector<Tensor>{g[0]};
  });
  Tensor loss = add(sum(square(x)), sum(side_out));
  autograd::grad(loss, x);
  EXPECT_EQ(runs, 0);
}

// The custom op of docs/coming_from_pytorch.md: swish with a differentiable hand-written backward has the same
// first and second derivatives as silu.
Tensor swish(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard ng;
    out = mul(x, sigmoid(x));
  }
  autograd::attach_differentiable(out, "SwishBackward", {x}, [x](const std::vector<Tensor>& g) {
    Tensor s = sigmoid(x);
    return std::vector<Tensor>{mul(g[0], add(s, mul(mul(x, s), rsub(s, 1.0))))};
  });
  return out;
}

TEST(Grad, CustomDifferentiableOpHasSecondDerivatives) {
  Tensor x = rand_f64({5}, 31).set_requires_grad(true);
  Tensor g1 = autograd::grad(sum(swish(x)), x, Tensor(), {.create_graph = true});
  Tensor g2 = autograd::grad(sum(g1), x);
  Tensor r1 = autograd::grad(sum(silu(x)), x, Tensor(), {.create_graph = true});
  Tensor r2 = autograd::grad(sum(r1), x);
  std::vector<double> a1 = g1.to_vector<double>(), b1 = r1.to_vector<double>();
  std::vector<double> a2 = g2.to_vector<double>(), b2 = r2.to_vector<double>();
  for (size_t i = 0; i < a1.size(); ++i) {
    EXPECT_NEAR(a1[i], b1[i], 1e-14);
    EXPECT_NEAR(a2[i], b2[i], 1e-14);
  }
  testing::expect_second_derivatives_match([](const std::vector<Tensor>& in) { return swish(in[0]); },
                                           {rand_f64({4}, 32).set_requires_grad(true)});
}

}  // namespace
}  // namespace volt
