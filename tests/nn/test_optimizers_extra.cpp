// RMSprop, Adagrad and Lion (nn/optimizers.h) against f64 references of PyTorch's documented algorithms (Lion:
// the paper's / lion-pytorch's) written here, hand-computed single steps, every option, parameter groups and
// schedulers, state_dict round trips (through a safetensors file) that resume bit for bit, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "common/gradcheck.h"
#include "nn/optim_test_util.h"
#include <volt/kernels/optim_extra.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/nn.h>
#include <volt/nn/optimizers.h>
#include <volt/nn/serialization.h>

using namespace volt;

namespace {

using namespace optim_test;

// ---- f64 references, line by line from the documented algorithms ------------------------------------------

// torch.optim.RMSprop (_single_tensor_rmsprop).
struct RefRMSprop {
  double lr, alpha, eps, wd, momentum;
  bool centered;
  Vec sq, buf, ga;
  void step(Vec& p, const Vec& grad) {
    if (sq.empty()) sq.assign(p.size(), 0.0), buf.assign(p.size(), 0.0), ga.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (wd != 0) g = g + wd * p[i];
      sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
      double avg;
      if (centered) {
        ga[i] = ga[i] + (1 - alpha) * (g - ga[i]);
        avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
      } else {
        avg = std::sqrt(sq[i]) + eps;
      }
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + g / avg;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * g / avg;
      }
    }
  }
};

// torch.optim.Adagrad (_single_tensor_adagrad).
struct RefAdagrad {
  double lr, lr_decay, wd, init, eps;
  Vec sum;
  int64_t step_count = 0;
  void step(Vec& p, const Vec& grad) {
    if (sum.empty()) sum.assign(p.size(), init);
    ++step_count;
    const double clr = lr / (1 + static_cast<double>(step_count - 1) * lr_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (wd != 0) g = g + wd * p[i];
      sum[i] += g * g;
      p[i] -= clr * g / (std::sqrt(sum[i]) + eps);
    }
  }
};

// Lion (Chen et al. 2023, Algorithm 2; lion-pytorch's update_fn).
struct RefLion {
  double lr, b1, b2, wd;
  Vec m;
  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      const double c = b1 * m[i] + (1 - b1) * grad[i];
      p[i] -= lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
      m[i] = b2 * m[i] + (1 - b2) * grad[i];
    }
  }
};

// Seven steps of `opt` over parameters a (n) and b (5) in one group (one multi-tensor update) against `ref_a` /
// `ref_b` stepping the same gradients.
template <class Ref>
void expect_matches(optim::Optimizer& opt, Tensor& a, Tensor& b, Ref ref_a, Ref ref_b, double tol) {
  Vec va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (int k = 0; k < 7; ++k) {
    const Vec ga = grad_at(va.size(), k), gb = grad_at(vb.size(), k + 11);
    set_grad(a, ga);
    set_grad(b, gb);
    opt.step();
    ref_a.step(va, ga);
    ref_b.step(vb, gb);
  }
  expect_vec_near(a, va, tol);
  expect_vec_near(b, vb, tol);
}

double tol_of(DType dt) { return dt == DType::f64 ? 1e-12 : 5e-6; }

}  // namespace

// ---- against the references: every option ------------------------------------------------------------------

struct RmspropCase {
  double lr, alpha, eps, wd, momentum;
  bool centered;
};
class RmspropMatchesReference : public ::testing::TestWithParam<RmspropCase> {};

TEST_P(RmspropMatchesReference, SevenStepsF64AndF32) {
  const RmspropCase c = GetParam();
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = param(init_values(37), dt), b = param(init_values(5, 1.0), dt);
    optim::RMSprop opt({a, b}, {.lr = c.lr, .alpha = c.alpha, .eps = c.eps, .weight_decay = c.wd,
                                .momentum = c.momentum, .centered = c.centered});
    RefRMSprop r{c.lr, c.alpha, c.eps, c.wd, c.momentum, c.centered, {}, {}, {}};
    expect_matches(opt, a, b, r, r, tol_of(dt));
    EXPECT_EQ(opt.type_name(), "RMSprop");
    // The state kept is what the options use, under torch's names.
    std::vector<std::string> names;
    for (const auto& [k, t] : opt.state_dict())
      if (k.rfind("state.0.0.", 0) == 0) names.push_back(k.substr(10));
    std::vector<std::string> want{"step", "square_avg"};
    if (c.momentum > 0) want.push_back("momentum_buffer");
    if (c.centered) want.push_back("grad_avg");
    EXPECT_EQ(names, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, RmspropMatchesReference,
                         ::testing::Values(RmspropCase{1e-2, 0.99, 1e-8, 0.0, 0.0, false},
                                           RmspropCase{3e-2, 0.9, 1e-6, 0.1, 0.0, false},
                                           RmspropCase{1e-2, 0.95, 1e-8, 0.0, 0.9, false},
                                           RmspropCase{1e-2, 0.8, 1e-8, 0.0, 0.0, true},
                                           RmspropCase{2e-2, 0.9, 1e-4, 0.05, 0.5, true}));

struct AdagradCase {
  double lr, lr_decay, wd, init, eps;
};
class AdagradMatchesReference : public ::testing::TestWithParam<AdagradCase> {};

TEST_P(AdagradMatchesReference, SevenStepsF64AndF32) {
  const AdagradCase c = GetParam();
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = param(init_values(37), dt), b = param(init_values(5, 1.0), dt);
    optim::Adagrad opt({a, b}, {.lr = c.lr, .lr_decay = c.lr_decay, .weight_decay = c.wd,
                                .initial_accumulator_value = c.init, .eps = c.eps});
    RefAdagrad r{c.lr, c.lr_decay, c.wd, c.init, c.eps, {}, 0};
    expect_matches(opt, a, b, r, r, tol_of(dt));
    EXPECT_EQ(opt.type_name(), "Adagrad");
    EXPECT_EQ(opt.step_count(0, 1), 7);
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, AdagradMatchesReference,
                         ::testing::Values(AdagradCase{1e-2, 0.0, 0.0, 0.0, 1e-10},
                                           AdagradCase{5e-2, 0.3, 0.0, 0.0, 1e-10},
                                           AdagradCase{5e-2, 0.0, 0.1, 0.0, 1e-10},
                                           AdagradCase{5e-2, 0.0, 0.0, 0.5, 1e-6},
                                           AdagradCase{0.1, 0.1, 0.02, 0.1, 1e-8}));

struct LionCase {
  double lr, b1, b2, wd;
};
class LionMatchesReference : public ::testing::TestWithParam<LionCase> {};

TEST_P(LionMatchesReference, SevenStepsF64AndF32) {
  const LionCase c = GetParam();
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = param(init_values(37), dt), b = param(init_values(5, 1.0), dt);
    optim::Lion opt({a, b}, {.lr = c.lr, .betas = {c.b1, c.b2}, .weight_decay = c.wd});
    RefLion r{c.lr, c.b1, c.b2, c.wd, {}};
    expect_matches(opt, a, b, r, r, tol_of(dt));
    EXPECT_EQ(opt.type_name(), "Lion");
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, LionMatchesReference,
                         ::testing::Values(LionCase{1e-4, 0.9, 0.99, 0.0}, LionCase{1e-2, 0.9, 0.99, 0.0},
                                           LionCase{3e-2, 0.8, 0.95, 0.1}));

// ---- single steps by hand ------------------------------------------------------------------------------------

TEST(OptimizersExtra, OneStepByHand) {
  // p = (1, -2), g = (2, 1).
  auto run = [](auto make, double p0 = 1.0) {
    Tensor p = param({p0, -2.0});
    auto opt = make(p);
    set_grad(p, {2.0, 1.0});
    opt->step();
    return p.to_vector<double>();
  };
  using optim::RMSprop;
  // RMSprop, alpha 0.75, eps 0: v = 0.25 g^2 = (1, 0.25), p -= 0.1 g / sqrt(v) = 0.1 * (2 / 1, 1 / 0.5).
  Vec r = run([](Tensor& p) { return std::make_unique<RMSprop>(std::vector<Tensor>{p}, optim::RMSpropOptions{.lr = 0.1, .alpha = 0.75, .eps = 0.0}); });
  EXPECT_DOUBLE_EQ(r[0], 0.8);
  EXPECT_DOUBLE_EQ(r[1], -2.2);
  // Centered: grad_avg = 0.25 g = (0.5, 0.25), denominators sqrt(1 - 0.25) and sqrt(0.25 - 0.0625).
  r = run([](Tensor& p) { return std::make_unique<RMSprop>(std::vector<Tensor>{p}, optim::RMSpropOptions{.lr = 0.1, .alpha = 0.75, .eps = 0.0, .centered = true}); });
  EXPECT_NEAR(r[0], 1.0 - 0.2 / std::sqrt(0.75), 1e-15);
  EXPECT_NEAR(r[1], -2.0 - 0.1 / std::sqrt(0.1875), 1e-15);
  // Weight decay 0.5: g' = (2.5, 0), v = (1.5625, 0): p0 -= 0.1 * 2.5 / 1.25; p1's g' = 1 - 1 = 0 (0/0 avoided by eps).
  r = run([](Tensor& p) { return std::make_unique<RMSprop>(std::vector<Tensor>{p}, optim::RMSpropOptions{.lr = 0.1, .alpha = 0.75, .eps = 1e-300, .weight_decay = 0.5}); });
  EXPECT_DOUBLE_EQ(r[0], 0.8);
  EXPECT_DOUBLE_EQ(r[1], -2.0);
  // Momentum: buf = g / sqrt(v) = (2, 2); p -= 0.1 * buf.
  r = run([](Tensor& p) { return std::make_unique<RMSprop>(std::vector<Tensor>{p}, optim::RMSpropOptions{.lr = 0.1, .alpha = 0.75, .eps = 0.0, .momentum = 0.9}); });
  EXPECT_DOUBLE_EQ(r[0], 0.8);
  EXPECT_DOUBLE_EQ(r[1], -2.2);
  // Adagrad, eps 0: sum = g^2, p -= 0.1 g / |g| = 0.1 sign(g); with initial_accumulator_value 5: sum = (9, 6).
  r = run([](Tensor& p) { return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, optim::AdagradOptions{.lr = 0.1, .eps = 0.0}); });
  EXPECT_DOUBLE_EQ(r[0], 0.9);
  EXPECT_DOUBLE_EQ(r[1], -2.1);
  r = run([](Tensor& p) { return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, optim::AdagradOptions{.lr = 0.1, .initial_accumulator_value = 5.0, .eps = 0.0}); });
  EXPECT_NEAR(r[0], 1.0 - 0.2 / 3.0, 1e-15);
  EXPECT_NEAR(r[1], -2.0 - 0.1 / std::sqrt(6.0), 1e-15);
  // Lion: m = 0, so the step is -lr * sign(g); weight decay 0.5 first scales p by 1 - 0.05.
  r = run([](Tensor& p) { return std::make_unique<optim::Lion>(std::vector<Tensor>{p}, optim::LionOptions{.lr = 0.1}); });
  EXPECT_DOUBLE_EQ(r[0], 0.9);
  EXPECT_DOUBLE_EQ(r[1], -2.1);
  r = run([](Tensor& p) { return std::make_unique<optim::Lion>(std::vector<Tensor>{p}, optim::LionOptions{.lr = 0.1, .weight_decay = 0.5}); });
  EXPECT_DOUBLE_EQ(r[0], 0.95 - 0.1);
  EXPECT_DOUBLE_EQ(r[1], -1.9 - 0.1);
}

TEST(OptimizersExtra, AdagradLrDecayAndLionSignOfZeroByHand) {
  // Adagrad, lr_decay 1: the second step's lr is 0.1 / 2. g = 3 twice, eps 0: sum 9 then 18.
  Tensor p = param({0.0});
  optim::Adagrad ada({p}, {.lr = 0.1, .lr_decay = 1.0, .eps = 0.0});
  set_grad(p, {3.0});
  ada.step();
  EXPECT_DOUBLE_EQ(p.item(), -0.1);
  set_grad(p, {3.0});
  ada.step();
  EXPECT_NEAR(p.item(), -0.1 - 0.05 * 3.0 / std::sqrt(18.0), 1e-15);
  // Lion: a zero interpolation leaves the parameter (sign(0) = 0) while the momentum still moves.
  Tensor q = param({1.0, -0.0});
  optim::Lion lion({q}, {.lr = 0.1, .betas = {0.5, 0.5}});
  set_grad(q, {0.0, 0.0});
  lion.step();
  EXPECT_EQ(q.to_vector<double>(), (Vec{1.0, 0.0}));
  set_grad(q, {4.0, -4.0});
  lion.step();  // c = 0.5 * 0 + 0.5 * g: p -= 0.1 sign(g); m = 0.5 * g
  expect_vec_near(q, {0.9, 0.1}, 1e-15);
  set_grad(q, {-2.0, 2.0});
  lion.step();  // c = 0.5 * m + 0.5 * g = (1 - 1, -1 + 1) = 0: no move
  expect_vec_near(q, {0.9, 0.1}, 1e-15);
}

// ---- groups, half parameters, schedulers ------------------------------------------------------------------

TEST(OptimizersExtra, ParamGroupsTakeTheirOwnOptions) {
  const size_t n = 11;
  Tensor a = param(init_values(n)), b = param(init_values(n, 0.5)), c = param(init_values(3));
  optim::RMSprop opt({optim::ParamGroup{{a}, 0.01, {}}, optim::ParamGroup{{b}, 0.03, {.momentum = 0.5, .weight_decay = 0.1}}},
                     {.lr = 0.02, .alpha = 0.9});
  opt.set_centered(1, true);
  opt.set_alpha(1, 0.8);
  opt.add_param_group({{c}, std::numeric_limits<double>::quiet_NaN(), {}});  // the defaults
  EXPECT_DOUBLE_EQ(opt.alpha(2), 0.9);
  EXPECT_FALSE(opt.centered(2));
  EXPECT_TRUE(opt.centered(1));
  EXPECT_DOUBLE_EQ(opt.param_groups()[2].lr, 0.02);
  RefRMSprop ra{0.01, 0.9, 1e-8, 0.0, 0.0, false, {}, {}, {}};
  RefRMSprop rb{0.03, 0.8, 1e-8, 0.1, 0.5, true, {}, {}, {}};
  RefRMSprop rc{0.02, 0.9, 1e-8, 0.0, 0.0, false, {}, {}, {}};
  Vec va = init_values(n), vb = init_values(n, 0.5), vc = init_values(3);
  for (int k = 0; k < 4; ++k) {
    set_grad(a, grad_at(n, k));
    set_grad(b, grad_at(n, k + 3));
    set_grad(c, grad_at(3, k + 6));
    opt.step();
    ra.step(va, grad_at(n, k));
    rb.step(vb, grad_at(n, k + 3));
    rc.step(vc, grad_at(3, k + 6));
  }
  expect_vec_near(a, va, 1e-12);
  expect_vec_near(b, vb, 1e-12);
  expect_vec_near(c, vc, 1e-12);

  optim::Adagrad ada({optim::ParamGroup{{param({1.0})}, 0.1, {}}});
  ada.set_lr_decay(0, 0.5);
  ada.set_initial_accumulator_value(0, 0.25);
  EXPECT_DOUBLE_EQ(ada.lr_decay(0), 0.5);
  EXPECT_DOUBLE_EQ(ada.initial_accumulator_value(0), 0.25);
  Tensor d = ada.param_groups()[0].params[0];
  set_grad(d, {1.0});
  ada.step();
  EXPECT_NEAR(d.item(), 1.0 - 0.1 / (std::sqrt(1.25) + 1e-10), 1e-15);
}

TEST(OptimizersExtra, ParametersWithoutGradAreSkipped) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  optim::Lion opt({a, b}, {.lr = 0.1});
  set_grad(a, {1.0, -1.0});
  opt.step();
  EXPECT_EQ(opt.step_count(0, 0), 1);
  EXPECT_EQ(opt.step_count(0, 1), 0);
  EXPECT_DOUBLE_EQ(b.item(), 3.0);
  EXPECT_EQ(opt.state_dict().size(), 2u);  // a's step and exp_avg
}

TEST(OptimizersExtra, HalfParametersKeepF32StateUnlessAskedNot) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor p = param(init_values(9), dt);
    optim::RMSprop opt({p}, {.lr = 0.01, .momentum = 0.9, .centered = true});
    RefRMSprop r{0.01, 0.99, 1e-8, 0.0, 0.9, true, {}, {}, {}};
    Vec v = p.to_vector<double>();
    for (int k = 0; k < 3; ++k) {
      set_grad(p, grad_at(9, k));
      Vec g = p.grad().to_vector<double>();  // the gradient as the half dtype holds it
      opt.step();
      r.step(v, g);
    }
    EXPECT_EQ(p.dtype(), dt);
    expect_vec_near(p, v, dt == DType::bf16 ? 2e-2 : 4e-3);
    for (const auto& [k, t] : opt.state_dict())
      if (k.find("step") == std::string::npos) EXPECT_EQ(t.dtype(), DType::f32) << k;
    Tensor q = param(init_values(9), dt);
    optim::Adagrad low({q}, {.lr = 0.01, .fp32_state = false});
    set_grad(q, grad_at(9, 0));
    low.step();
    EXPECT_EQ(low.state_dict()[1].second.dtype(), dt);
    Tensor s = param(init_values(9), dt);
    optim::Lion lion({s}, {.lr = 0.01});
    set_grad(s, grad_at(9, 0));
    lion.step();
    EXPECT_EQ(lion.state_dict()[1].second.dtype(), DType::f32);
  }
}

TEST(OptimizersExtra, SchedulersDriveLrAndMomentum) {
  // StepLR halves RMSprop's lr after two steps; the update reads it.
  Tensor a = param(init_values(7));
  optim::RMSprop opt({a}, {.lr = 0.04});
  optim::StepLR sched(opt, 2, 0.5);
  RefRMSprop r{0.04, 0.99, 1e-8, 0.0, 0.0, false, {}, {}, {}};
  Vec v = init_values(7);
  for (int k = 0; k < 5; ++k) {
    r.lr = opt.param_groups()[0].lr;
    set_grad(a, grad_at(7, k));
    opt.step();
    r.step(v, grad_at(7, k));
    sched.step();
  }
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, 0.01);
  expect_vec_near(a, v, 1e-12);
  // OneCycleLR cycles RMSprop's momentum and Lion's beta1, as torch's does for momentum / betas.
  Tensor b = param({1.0});
  optim::RMSprop rms({b}, {.lr = 0.01, .momentum = 0.9});
  optim::OneCycleLR one(rms, 0.1, 10);
  EXPECT_DOUBLE_EQ(rms.param_groups()[0].options.momentum.value(), 0.95);  // max_momentum at the start
  Tensor c = param({1.0});
  optim::Lion lion({c}, {.lr = 1e-3});
  optim::OneCycleLR one_l(lion, 0.01, 10);
  EXPECT_DOUBLE_EQ(lion.param_groups()[0].options.beta1.value(), 0.95);
  for (int k = 0; k < 4; ++k) {
    set_grad(c, {1.0});
    lion.step();
    one_l.step();
  }
  EXPECT_LT(lion.param_groups()[0].options.beta1.value(), 0.95);
  EXPECT_GT(lion.param_groups()[0].lr, 1e-3);
}

// ---- checkpoints -------------------------------------------------------------------------------------------

namespace {

// Three steps of `make()` over (a, b), its state saved to a safetensors file and its hyper-state kept, loaded
// into a second optimizer over copies of the parameters; three more steps of both must agree bit for bit.
template <class Make>
void expect_round_trip(Make make, size_t expected_tensors, const std::string& tag) {
  SCOPED_TRACE(tag);
  const size_t n = 19;
  Tensor a1 = param(init_values(n)), b1 = param(init_values(3, 2.0), DType::f32);
  auto o1 = make(std::vector<Tensor>{a1}, std::vector<Tensor>{b1});
  for (int k = 0; k < 3; ++k) {
    set_grad(a1, grad_at(n, k));
    set_grad(b1, grad_at(3, k + 5));
    o1->step();
  }
  const auto path = std::filesystem::temp_directory_path() / ("volt_optim_extra_" + tag + ".safetensors");
  nn::save_safetensors(path.string(), o1->state_dict());
  const auto hs = o1->hyper_state();
  EXPECT_EQ(o1->state_dict().size(), expected_tensors);
  EXPECT_EQ(o1->state_dict()[0].first, "state.0.0.step");
  EXPECT_DOUBLE_EQ(hs.at("state.1.0.step"), 3.0);
  Tensor a2 = param(a1.to_vector<double>()), b2 = param(b1.to_vector<double>(), DType::f32);
  auto o2 = make(std::vector<Tensor>{a2}, std::vector<Tensor>{b2});
  o2->load_state_dict(nn::load_safetensors(path.string()));
  o2->load_hyper_state(hs);
  std::filesystem::remove(path);
  EXPECT_EQ(o2->step_count(1, 0), 3);
  for (int k = 3; k < 6; ++k) {
    for (auto* p : {&a1, &a2}) set_grad(*p, grad_at(n, k));
    for (auto* p : {&b1, &b2}) set_grad(*p, grad_at(3, k + 5));
    o1->step();
    o2->step();
  }
  EXPECT_EQ(a1.to_vector<double>(), a2.to_vector<double>());
  EXPECT_EQ(b1.to_vector<float>(), b2.to_vector<float>());
  const auto s1 = o1->state_dict(), s2 = o2->state_dict();
  ASSERT_EQ(s1.size(), s2.size());
  for (size_t i = 0; i < s1.size(); ++i) {
    EXPECT_EQ(s1[i].first, s2[i].first);
    const Vec x = s1[i].second.template to_vector<double>(), y = s2[i].second.template to_vector<double>();
    EXPECT_EQ(x, y) << s1[i].first;
  }
}

std::vector<optim::ParamGroup> two_groups(std::vector<Tensor> a, std::vector<Tensor> b, double lr_b) {
  return {optim::ParamGroup{std::move(a), std::numeric_limits<double>::quiet_NaN(), {}},
          optim::ParamGroup{std::move(b), lr_b, {}}};
}

}  // namespace

TEST(OptimizersExtra, StateDictRoundTripResumesBitExact) {
  expect_round_trip(
      [](std::vector<Tensor> a, std::vector<Tensor> b) {
        return std::make_unique<optim::RMSprop>(two_groups(a, b, 0.02), optim::RMSpropOptions{
            .lr = 0.01, .alpha = 0.9, .weight_decay = 0.01, .momentum = 0.8, .centered = true});
      },
      8, "rmsprop");  // 2 params x (step, square_avg, momentum_buffer, grad_avg)
  expect_round_trip(
      [](std::vector<Tensor> a, std::vector<Tensor> b) {
        return std::make_unique<optim::Adagrad>(two_groups(a, b, 0.2), optim::AdagradOptions{
            .lr = 0.1, .lr_decay = 0.2, .weight_decay = 0.05, .initial_accumulator_value = 0.1});
      },
      4, "adagrad");
  expect_round_trip(
      [](std::vector<Tensor> a, std::vector<Tensor> b) {
        return std::make_unique<optim::Lion>(two_groups(a, b, 3e-3), optim::LionOptions{
            .lr = 1e-3, .betas = {0.85, 0.98}, .weight_decay = 0.1});
      },
      4, "lion");
}

TEST(OptimizersExtra, HyperStateCarriesTheGroupOptions) {
  Tensor a = param({1.0});
  optim::RMSprop opt({a}, {.lr = 0.01, .eps = 1e-6, .weight_decay = 0.1, .momentum = 0.5});
  auto hs = opt.hyper_state();
  EXPECT_DOUBLE_EQ(hs.at("group.0.lr"), 0.01);
  EXPECT_DOUBLE_EQ(hs.at("group.0.momentum"), 0.5);
  EXPECT_DOUBLE_EQ(hs.at("group.0.weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(hs.at("group.0.eps"), 1e-6);
  EXPECT_EQ(hs.count("group.0.beta1"), 0u);
  hs["group.0.momentum"] = 0.7;
  opt.load_hyper_state(hs);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].options.momentum.value(), 0.7);
  VOLT_EXPECT_ERROR(opt.load_hyper_state({{"group.0.beta1", 0.9}}), "RMSprop", "beta1", "does not have");
  optim::Lion lion({param({1.0})});
  EXPECT_DOUBLE_EQ(lion.hyper_state().at("group.0.beta2"), 0.99);
  VOLT_EXPECT_ERROR(lion.load_hyper_state({{"group.0.beta1", 1.5}}), "Lion", "group.0.beta1", "[0, 1)");
}

// RMSprop's alpha/centered and Adagrad's lr_decay/initial_accumulator_value are group options: set per group,
// saved by hyper_state() and restored (with the constructor's range checks) by load_hyper_state().
TEST(OptimizersExtra, PerGroupOnlyOptionsRoundTripThroughHyperState) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::RMSprop r1({optim::ParamGroup{{a}, 0.01, {}}, optim::ParamGroup{{b}, 0.02, {.alpha = 0.5}}},
                    {.alpha = 0.9});
  r1.set_centered(0, true);
  const auto hs = r1.hyper_state();
  EXPECT_DOUBLE_EQ(hs.at("group.0.alpha"), 0.9);
  EXPECT_DOUBLE_EQ(hs.at("group.1.alpha"), 0.5);
  EXPECT_DOUBLE_EQ(hs.at("group.0.centered"), 1.0);
  EXPECT_DOUBLE_EQ(hs.at("group.1.centered"), 0.0);
  EXPECT_EQ(hs.count("group.0.lr_decay"), 0u);
  optim::RMSprop r2({optim::ParamGroup{{param({1.0})}, 0.01, {}}, optim::ParamGroup{{param({2.0})}, 0.02, {}}},
                    {.alpha = 0.9});
  EXPECT_DOUBLE_EQ(r2.alpha(1), 0.9);
  r2.load_hyper_state(hs);
  EXPECT_DOUBLE_EQ(r2.alpha(1), 0.5);
  EXPECT_TRUE(r2.centered(0));
  EXPECT_FALSE(r2.centered(1));
  VOLT_EXPECT_ERROR(r2.load_hyper_state({{"group.1.alpha", 1.5}}), "RMSprop", "'group.1.alpha' = 1.5",
                    "expected a value in [0, 1]");
  VOLT_EXPECT_ERROR(r2.load_hyper_state({{"group.0.centered", 0.5}}), "'group.0.centered'", "0 or 1");
  EXPECT_DOUBLE_EQ(r2.alpha(1), 0.5);  // a rejected record changed nothing
  VOLT_EXPECT_ERROR(r2.add_param_group({{param({3.0})}, 0.1, {.alpha = -0.1}}), "alpha must be in [0, 1]", "-0.1");

  optim::Adagrad g1({optim::ParamGroup{{param({1.0})}, 0.1, {.initial_accumulator_value = 0.5}}}, {.lr_decay = 0.1});
  g1.set_lr_decay(0, 0.3);
  const auto ha = g1.hyper_state();
  EXPECT_DOUBLE_EQ(ha.at("group.0.lr_decay"), 0.3);
  EXPECT_DOUBLE_EQ(ha.at("group.0.initial_accumulator_value"), 0.5);
  EXPECT_EQ(ha.count("group.0.alpha"), 0u);
  optim::Adagrad g2({param({1.0})});
  g2.load_hyper_state(ha);
  EXPECT_DOUBLE_EQ(g2.lr_decay(0), 0.3);
  EXPECT_DOUBLE_EQ(g2.initial_accumulator_value(0), 0.5);
  VOLT_EXPECT_ERROR(g2.load_hyper_state({{"group.0.lr_decay", -1.0}}), "Adagrad", "'group.0.lr_decay' = -1",
                    "a value >= 0");
  VOLT_EXPECT_ERROR(g2.load_hyper_state({{"group.0.alpha", 0.5}}), "Adagrad", "does not have");
  VOLT_EXPECT_ERROR(g2.set_lr_decay(1, 0.1), "Adagrad::set_lr_decay", "group 1 does not exist");
  optim::SGD sgd({param({1.0})}, {.lr = 0.1});
  VOLT_EXPECT_ERROR(sgd.add_param_group({{param({2.0})}, 0.1, {.centered = true}}), "option 'centered'");
}

// ---- errors ------------------------------------------------------------------------------------------------

TEST(OptimizersExtra, BadOptionsAreClearErrors) {
  Tensor a = param({1.0});
  VOLT_EXPECT_ERROR(optim::RMSprop({a}, {.lr = -1.0}), "RMSprop", "lr", "-1");
  VOLT_EXPECT_ERROR(optim::RMSprop({a}, {.alpha = 1.5}), "RMSprop", "alpha must be in [0, 1]", "1.5");
  VOLT_EXPECT_ERROR(optim::RMSprop({a}, {.eps = -1e-8}), "RMSprop", "eps");
  VOLT_EXPECT_ERROR(optim::RMSprop({a}, {.momentum = -0.5}), "RMSprop", "momentum", "-0.5");
  VOLT_EXPECT_ERROR(optim::RMSprop({a}, {.weight_decay = NAN}), "RMSprop", "weight_decay");
  VOLT_EXPECT_ERROR(optim::Adagrad({a}, {.lr_decay = -0.1}), "Adagrad", "lr_decay", "-0.1");
  VOLT_EXPECT_ERROR(optim::Adagrad({a}, {.initial_accumulator_value = -1.0}), "Adagrad", "initial_accumulator_value");
  VOLT_EXPECT_ERROR(optim::Adagrad({a}, {.eps = -1.0}), "Adagrad", "eps");
  VOLT_EXPECT_ERROR(optim::Lion({a}, {.betas = {1.0, 0.99}}), "Lion", "betas must be in [0, 1)", "(1, 0.99)");
  VOLT_EXPECT_ERROR(optim::Lion({a}, {.weight_decay = -0.1}), "Lion", "weight_decay");
  VOLT_EXPECT_ERROR(optim::Lion(std::vector<Tensor>{}), "empty");
  // Group options the optimizer does not have, and out-of-range group values.
  optim::RMSprop rms({a});
  Tensor b = param({2.0});
  VOLT_EXPECT_ERROR(rms.add_param_group({{b}, 0.1, {.beta1 = 0.9}}), "option 'beta1'");
  VOLT_EXPECT_ERROR(rms.add_param_group({{b}, 0.1, {.momentum = -1.0}}), "group 1");
  optim::Lion lion({param({1.0})});
  VOLT_EXPECT_ERROR(lion.add_param_group({{b}, 0.1, {.momentum = 0.9}}), "option 'momentum'");
  VOLT_EXPECT_ERROR(lion.add_param_group({{b}, 0.1, {.beta2 = 1.0}}), "betas must be in [0, 1)");
  optim::Adagrad ada({param({1.0})});
  VOLT_EXPECT_ERROR(ada.add_param_group({{b}, 0.1, {.amsgrad = true}}), "option 'amsgrad'");
  // The per-group options set through the optimizer.
  VOLT_EXPECT_ERROR(rms.set_alpha(0, -0.1), "set_alpha", "[0, 1]", "-0.1");
  VOLT_EXPECT_ERROR(rms.set_centered(3, true), "set_centered", "group 3", "1 parameter group");
  VOLT_EXPECT_ERROR(rms.alpha(5), "group 5");
  VOLT_EXPECT_ERROR(ada.set_lr_decay(0, -1.0), "lr_decay", "-1");
  VOLT_EXPECT_ERROR(ada.set_initial_accumulator_value(2, 1.0), "group 2");
  // State that belongs to another optimizer or another shape.
  VOLT_EXPECT_ERROR(rms.load_state_dict({{"state.0.0.exp_avg", zeros({1}, DType::f64)}}), "RMSprop", "exp_avg");
  VOLT_EXPECT_ERROR(lion.load_state_dict({{"state.0.0.exp_avg", zeros({4}, DType::f64)}}), "Lion", "(4,)", "(1,)");
  VOLT_EXPECT_ERROR(ada.load_state_dict({{"state.0.0.sum", zeros({1}, DType::f32)}}), "Adagrad", "float32", "float64");
}

TEST(OptimizersExtra, FusedOpsCheckTheirArguments) {
  NoGradGuard ng;
  Tensor p = zeros({3}), g = zeros({3}), s = zeros({3});
  VOLT_EXPECT_ERROR(rmsprop_step_(p, g, zeros({4}), Tensor(), Tensor(), {}), "rmsprop_step_", "square_avg", "(4,)");
  VOLT_EXPECT_ERROR(rmsprop_step_(p, g, s, Tensor(), Tensor(), {.momentum = 0.9}), "rmsprop_step_", "momentum_buffer");
  VOLT_EXPECT_ERROR(rmsprop_step_(p, g, s, Tensor(), Tensor(), {.centered = true}), "rmsprop_step_", "grad_avg");
  VOLT_EXPECT_ERROR(rmsprop_step_(p, g, s, Tensor(), Tensor(), {.alpha = 2.0}), "rmsprop_step_", "alpha");
  VOLT_EXPECT_ERROR(adagrad_step_(p, zeros({2}), s, {}), "adagrad_step_", "grad is (2,)");
  VOLT_EXPECT_ERROR(adagrad_step_(p, g, s, {.step = 0}), "adagrad_step_", "step must be >= 1");
  VOLT_EXPECT_ERROR(adagrad_step_(p, g, zeros({3}, DType::f64), {}), "adagrad_step_", "sum has dtype float64");
  VOLT_EXPECT_ERROR(lion_step_(p, g, Tensor(), {}), "lion_step_", "exp_avg must be defined");
  VOLT_EXPECT_ERROR(lion_step_multi_({LionTensors{p, g, s}, LionTensors{p, g, zeros({3})}}, {}), "lion_step_multi_",
                    "same parameter memory");
  VOLT_EXPECT_ERROR(lion_step_multi_({LionTensors{p, g, s}, LionTensors{zeros({2}, DType::f64), zeros({2}, DType::f64),
                                                                        zeros({2}, DType::f64)}},
                                     {}),
                    "lion_step_multi_", "entry 1", "float64");
  // The multi-tensor form equals single-tensor steps bit for bit (one list, different sizes).
  Tensor p1 = rand_with_seed({5}, 1, 0), p2 = rand_with_seed({300}, 2, 0), g1 = rand_with_seed({5}, 3, 0) - 0.5,
         g2 = rand_with_seed({300}, 4, 0) - 0.5;
  Tensor q1 = p1.clone(), q2 = p2.clone(), m1 = zeros({5}), m2 = zeros({300}), n1 = zeros({5}), n2 = zeros({300});
  const RmspropHyper h{.lr = 0.01, .momentum = 0.9, .centered = false};
  Tensor b1 = zeros({5}), b2 = zeros({300}), c1 = zeros({5}), c2 = zeros({300});
  rmsprop_step_multi_({RmspropTensors{p1, g1, m1, b1, Tensor()}, RmspropTensors{p2, g2, m2, b2, Tensor()}}, h);
  rmsprop_step_(q1, g1, n1, c1, Tensor(), h);
  rmsprop_step_(q2, g2, n2, c2, Tensor(), h);
  EXPECT_EQ(p1.to_vector<float>(), q1.to_vector<float>());
  EXPECT_EQ(p2.to_vector<float>(), q2.to_vector<float>());
  EXPECT_EQ(b2.to_vector<float>(), c2.to_vector<float>());
}

TEST(OptimizersExtra, GradModeOnIsRefused) {
  Tensor p = param({1.0, 2.0});
  Tensor g = zeros({2}, DType::f64), s = zeros({2}, DType::f64);
  VOLT_EXPECT_ERROR(lion_step_(p, g, s, {}), "lion_step_", "NoGradGuard");
}
