// Optimizers against naive references of PyTorch's documented algorithms, written here in double.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include "nn/optim_test_util.h"
#include <volt/nn/nn.h>

using namespace volt;

namespace {

using namespace optim_test;

struct RefSGD {
  double lr, momentum, dampening, wd;
  bool nesterov;
  Vec buf;
  void step(Vec& p, const Vec& g) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad;
  Vec m, v, vmax;
  int t = 0;
  void step(Vec& p, const Vec& g0) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0), vmax.assign(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g0[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double denom = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

}  // namespace

struct SgdCase {
  double lr, momentum, dampening, wd;
  bool nesterov;
};

class SgdMatchesReference : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdMatchesReference, SixSteps) {
  const SgdCase c = GetParam();
  const size_t n = 37;
  Vec ref = init_values(n);
  Tensor p = param(ref);
  optim::SGD opt({p}, {.lr = c.lr, .momentum = c.momentum, .dampening = c.dampening, .weight_decay = c.wd,
                       .nesterov = c.nesterov});
  RefSGD r{c.lr, c.momentum, c.dampening, c.wd, c.nesterov, {}};
  for (int k = 0; k < 6; ++k) {
    Vec g = grad_at(n, k);
    set_grad(p, g);
    opt.step();
    r.step(ref, g);
  }
  expect_vec_near(p, ref, 1e-12);
  EXPECT_EQ(opt.step_count(0, 0), 6);
}

INSTANTIATE_TEST_SUITE_P(Optim, SgdMatchesReference,
                         ::testing::Values(SgdCase{0.1, 0.0, 0.0, 0.0, false}, SgdCase{0.05, 0.9, 0.0, 0.0, false},
                                           SgdCase{0.05, 0.9, 0.3, 0.01, false}, SgdCase{0.05, 0.8, 0.0, 0.02, true},
                                           SgdCase{0.1, 0.0, 0.0, 0.1, false}));

struct AdamCase {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad;
};

class AdamMatchesReference : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamMatchesReference, SevenStepsF64AndF32) {
  const AdamCase c = GetParam();
  const size_t n = 53;
  for (DType dt : {DType::f64, DType::f32}) {
    Vec ref = init_values(n);
    Tensor p = param(ref, dt);
    std::unique_ptr<optim::Optimizer> opt;
    if (c.decoupled)
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                           optim::AdamWOptions{.lr = c.lr, .betas = {c.b1, c.b2}, .eps = c.eps,
                                                               .weight_decay = c.wd, .amsgrad = c.amsgrad});
    else
      opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p},
                                          optim::AdamOptions{.lr = c.lr, .betas = {c.b1, c.b2}, .eps = c.eps,
                                                             .weight_decay = c.wd, .amsgrad = c.amsgrad});
    RefAdam r{c.lr, c.b1, c.b2, c.eps, c.wd, c.decoupled, c.amsgrad, {}, {}, {}, 0};
    for (int k = 0; k < 7; ++k) {
      Vec g = grad_at(n, k);
      if (c.amsgrad && k == 3) for (double& x : g) x *= 0.1;  // makes max(v) differ from v
      set_grad(p, g);
      opt->step();
      r.step(ref, g);
    }
    expect_vec_near(p, ref, dt == DType::f64 ? 1e-12 : 2e-6);
    EXPECT_EQ(opt->type_name(), c.decoupled ? "AdamW" : "Adam");
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, AdamMatchesReference,
                         ::testing::Values(AdamCase{1e-2, 0.9, 0.999, 1e-8, 0.0, false, false},
                                           AdamCase{3e-2, 0.8, 0.99, 1e-6, 0.1, false, false},
                                           AdamCase{3e-2, 0.9, 0.99, 1e-8, 0.1, true, false},
                                           AdamCase{1e-2, 0.9, 0.999, 1e-8, 0.0, false, true},
                                           AdamCase{2e-2, 0.9, 0.95, 1e-8, 0.05, true, true}));

TEST(Optim, AdamWDefaultWeightDecayIsOnePercent) {
  Tensor p = param({1.0});
  optim::AdamW opt({p});
  EXPECT_DOUBLE_EQ(opt.defaults().weight_decay.value(), 1e-2);
  set_grad(p, {0.0});
  opt.step();  // zero gradient: only the decoupled decay moves p
  EXPECT_NEAR(p.item(), 1.0 - 1e-3 * 1e-2, 1e-15);
}

TEST(Optim, ParamGroupsUseTheirOwnLr) {
  const size_t n = 11;
  Vec ra = init_values(n), rb = init_values(n, 1.0);
  Tensor a = param(ra), b = param(rb);
  optim::ParamGroup ga{{a}};  // default lr
  optim::ParamGroup gb{{b}, 0.5, {.momentum = 0.5}};
  optim::SGD opt(std::vector<optim::ParamGroup>{ga, gb}, {.lr = 0.1, .momentum = 0.9});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].options.momentum.value(), 0.5);
  RefSGD r1{0.1, 0.9, 0, 0, false, {}}, r2{0.5, 0.5, 0, 0, false, {}};
  for (int k = 0; k < 4; ++k) {
    set_grad(a, grad_at(n, k));
    set_grad(b, grad_at(n, k + 10));
    opt.step();
    r1.step(ra, grad_at(n, k));
    r2.step(rb, grad_at(n, k + 10));
  }
  expect_vec_near(a, ra, 1e-12);
  expect_vec_near(b, rb, 1e-12);
}

TEST(Optim, ParamsWithoutGradAreSkipped) {
  Tensor a = param({1, 2}), b = param({3, 4});
  optim::Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, {1, 1});
  opt.step();
  EXPECT_EQ(b.to_vector<double>(), (Vec{3, 4}));
  EXPECT_EQ(opt.step_count(0, 1), 0);
  EXPECT_EQ(opt.step_count(0, 0), 1);
  // First Adam step moves each element by lr (m/sqrt(v) = 1).
  expect_vec_near(a, {0.9, 1.9}, 1e-9);
  auto sd = opt.state_dict();
  for (const auto& [k, t] : sd) EXPECT_EQ(k.rfind("state.0.0.", 0), 0u) << k;
  EXPECT_EQ(sd.size(), 3u);  // step, exp_avg, exp_avg_sq
}

TEST(Optim, ZeroGradClearsGroups) {
  Tensor a = param({1, 2});
  optim::SGD opt({a}, {.lr = 0.1});
  set_grad(a, {1, 1});
  opt.zero_grad(false);
  EXPECT_EQ(a.grad().to_vector<double>(), (Vec{0, 0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Optim, StateDictRoundTripContinuesIdentically) {
  const size_t n = 19;
  Tensor a1 = param(init_values(n)), b1 = param(init_values(3, 2.0));
  optim::Adam o1({a1, b1}, {.lr = 0.05, .weight_decay = 0.01, .amsgrad = true});
  for (int k = 0; k < 3; ++k) {
    set_grad(a1, grad_at(n, k));
    set_grad(b1, grad_at(3, k + 5));
    o1.step();
  }
  Tensor a2 = param(a1.to_vector<double>()), b2 = param(b1.to_vector<double>());
  optim::Adam o2({a2, b2}, {.lr = 0.05, .weight_decay = 0.01, .amsgrad = true});
  auto sd = o1.state_dict();
  EXPECT_EQ(sd.size(), 8u);  // 2 params x (step, exp_avg, exp_avg_sq, max_exp_avg_sq)
  EXPECT_EQ(sd[0].first, "state.0.0.step");
  EXPECT_EQ(sd[0].second.item<int64_t>(), 3);
  auto hs = o1.hyper_state();
  EXPECT_DOUBLE_EQ(hs.at("group.0.lr"), 0.05);
  EXPECT_DOUBLE_EQ(hs.at("group.0.beta2"), 0.999);
  EXPECT_DOUBLE_EQ(hs.at("group.0.amsgrad"), 1.0);
  EXPECT_DOUBLE_EQ(hs.at("state.0.1.step"), 3.0);
  o2.load_state_dict(sd);
  o2.load_hyper_state(hs);
  VOLT_EXPECT_ERROR(o2.load_hyper_state({{"group.7.lr", 1.0}}), "group 7");
  VOLT_EXPECT_ERROR(o2.load_hyper_state({{"state.0.9.step", 1.0}}), "state.0.9.step");
  EXPECT_EQ(o2.step_count(0, 1), 3);
  for (int k = 3; k < 6; ++k) {
    for (auto* p : {&a1, &a2}) set_grad(*p, grad_at(n, k));
    for (auto* p : {&b1, &b2}) set_grad(*p, grad_at(3, k + 5));
    o1.step();
    o2.step();
  }
  EXPECT_EQ(a1.to_vector<double>(), a2.to_vector<double>());
  EXPECT_EQ(b1.to_vector<double>(), b2.to_vector<double>());
  // The loaded state is a copy, not an alias of o1's.
  EXPECT_FALSE(o1.state_dict()[1].second.storage() == o2.state_dict()[1].second.storage());
}

TEST(Optim, LoadStateDictErrors) {
  Tensor a = param({1, 2});
  optim::SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  VOLT_EXPECT_ERROR(opt.load_state_dict({{"state.0.3.momentum_buffer", zeros({2})}}), "state.0.3", "parameter 3");
  VOLT_EXPECT_ERROR(opt.load_state_dict({{"state.0.0.momentum_buffer", zeros({5})}}), "(5,)", "(2,)");
  VOLT_EXPECT_ERROR(opt.load_state_dict({{"state.0.0.exp_avg", zeros({2})}}), "exp_avg");
  VOLT_EXPECT_ERROR(opt.load_state_dict({{"bogus", zeros({2})}}), "bogus");
}

TEST(Optim, HalfPrecisionParamsKeepF32State) {
  Tensor p = param({1, -1, 0.5}, DType::bf16);
  optim::Adam opt({p}, {.lr = 0.125});
  set_grad(p, {1, -1, 1});
  opt.step();
  auto sd = opt.state_dict();
  EXPECT_EQ(sd[1].first, "state.0.0.exp_avg");
  EXPECT_EQ(sd[1].second.dtype(), DType::f32);
  EXPECT_EQ(p.dtype(), DType::bf16);
  expect_vec_near(p, {0.875, -0.875, 0.375}, 1e-6);
}

TEST(Optim, ConstructorErrors) {
  VOLT_EXPECT_ERROR(optim::SGD(std::vector<Tensor>{}, {.lr = 0.1}), "empty");
  Tensor a = param({1});
  VOLT_EXPECT_ERROR(optim::SGD({a, a}, {.lr = 0.1}), "more than once");
  VOLT_EXPECT_ERROR(optim::Adam({a}, {.lr = 0.1, .betas = {1.0, 0.9}}), "betas");
  VOLT_EXPECT_ERROR(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), "nesterov");
}

TEST(Optim, GroupOptionsAreTypedAndCheckedWhenTheGroupIsAdded) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::SGD sgd({a}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  // Every option SGD uses is filled from its defaults; Adam's options stay unset.
  const optim::GroupOptions& o = sgd.param_groups()[0].options;
  EXPECT_DOUBLE_EQ(o.momentum.value(), 0.9);
  EXPECT_DOUBLE_EQ(o.dampening.value(), 0.0);
  EXPECT_DOUBLE_EQ(o.weight_decay.value(), 0.01);
  EXPECT_FALSE(o.nesterov.value());
  EXPECT_FALSE(o.beta1.has_value());
  EXPECT_FALSE(o.amsgrad.has_value());
  EXPECT_DOUBLE_EQ(sgd.default_lr(), 0.1);
  // An option the optimizer does not have, and out-of-range values, are refused with the group named.
  VOLT_EXPECT_ERROR(sgd.add_param_group({{b}, 0.1, {.beta1 = 0.9}}), "option 'beta1'");
  VOLT_EXPECT_ERROR(sgd.add_param_group({{b}, 0.1, {.momentum = -1.0}}), "group 1");
  VOLT_EXPECT_ERROR(sgd.add_param_group({{b}, 0.1, {.momentum = 0.0, .nesterov = true}}), "nesterov");
  optim::Adam adam({param({1.0})});
  VOLT_EXPECT_ERROR(adam.add_param_group({{b}, 0.1, {.beta2 = 1.0}}), "betas must be in [0, 1)");
  VOLT_EXPECT_ERROR(adam.add_param_group({{b}, 0.1, {.momentum = 0.5}}), "option 'momentum'");
  // Names live only at the checkpoint boundary: each option round-trips through its name.
  for (int k = 0; k <= static_cast<int>(optim::GroupOption::max_momentum); ++k) {
    const auto opt = static_cast<optim::GroupOption>(k);
    EXPECT_EQ(optim::parse_group_option(optim::group_option_name(opt)), opt);
  }
  EXPECT_FALSE(optim::parse_group_option("betas").has_value());
  auto hs = sgd.hyper_state();
  EXPECT_DOUBLE_EQ(hs.at("group.0.momentum"), 0.9);
  EXPECT_DOUBLE_EQ(hs.at("group.0.nesterov"), 0.0);
  EXPECT_EQ(hs.count("group.0.beta1"), 0u);
  VOLT_EXPECT_ERROR(sgd.load_hyper_state({{"group.0.beta1", 0.5}}), "names an option SGD does not have");
  sgd.load_hyper_state({{"group.0.momentum", 0.25}});
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options.momentum.value(), 0.25);
}
