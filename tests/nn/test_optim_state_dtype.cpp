// Optimizer state dtype for half-precision parameters: fp32 by default, the parameter's own dtype with
// fp32_state = false (the update is still computed in fp32; only the stored moments are rounded).
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/nn/optim.h>

using namespace volt;
using volt::testing::expect_close;

namespace {

Tensor param_of(const std::vector<float>& v, DType dt) {
  Tensor p = from_vector(v).to(dt);
  p.set_requires_grad(true);
  return p;
}

void set_grad(Tensor& p, const std::vector<float>& g) { p.set_grad(from_vector(g).to(p.dtype())); }

std::map<std::string, Tensor> state_of(const optim::Optimizer& o) {
  std::map<std::string, Tensor> out;
  for (auto& [k, t] : o.state_dict()) out[k] = t;
  return out;
}

}  // namespace

TEST(OptimStateDtype, AdamKeepsFp32StateUnlessOptedOut) {
  const std::vector<float> w0 = {0.5f, -1.25f, 2.0f, 0.1f}, g = {0.3f, -0.7f, 1.1f, 0.013f};
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor a = param_of(w0, dt), b = param_of(w0, dt);
    optim::Adam fp32(std::vector<Tensor>{a}, {.lr = 0.01});
    optim::Adam low(std::vector<Tensor>{b}, {.lr = 0.01, .fp32_state = false});
    EXPECT_TRUE(fp32.fp32_state());
    EXPECT_FALSE(low.fp32_state());
    EXPECT_EQ(fp32.state_dtype(dt), DType::f32);
    EXPECT_EQ(low.state_dtype(dt), dt);
    EXPECT_EQ(low.state_dtype(DType::f32), DType::f32);  // only half parameters are affected
    for (int step = 0; step < 3; ++step) {
      set_grad(a, g);
      set_grad(b, g);
      fp32.step();
      low.step();
      if (step == 0) {
        // m1 = (1 - beta1) * g, computed in fp32 from the stored gradient, then rounded once to the half type.
        std::vector<float> m1;
        for (float x : from_vector(g).to(dt).to(DType::f32).to_vector<float>()) m1.push_back(0.1f * x);
        Tensor want = from_vector(m1).to(dt);
        EXPECT_EQ(state_of(low).at("state.0.0.exp_avg").to(DType::f32).to_vector<float>(),
                  want.to(DType::f32).to_vector<float>());
      }
    }
    auto s32 = state_of(fp32), s16 = state_of(low);
    EXPECT_EQ(s32.at("state.0.0.exp_avg").dtype(), DType::f32);
    EXPECT_EQ(s32.at("state.0.0.exp_avg_sq").dtype(), DType::f32);
    EXPECT_EQ(s16.at("state.0.0.exp_avg").dtype(), dt);
    EXPECT_EQ(s16.at("state.0.0.exp_avg_sq").dtype(), dt);
    // The half-state run tracks the fp32-state run within the half type's rounding.
    const double tol = dt == DType::f16 ? 2e-3 : 2e-2;
    expect_close(b, a.to(DType::f64).to_vector<double>(), tol, tol);
    expect_close(s16.at("state.0.0.exp_avg"), s32.at("state.0.0.exp_avg").to_vector<double>(), tol, tol);
    EXPECT_NE(b.to(DType::f32).to_vector<float>(), from_vector(w0).to(dt).to(DType::f32).to_vector<float>());
  }
}

TEST(OptimStateDtype, SgdMomentumBufferInTheParamDtype) {
  const std::vector<float> w0 = {1.0f, -2.0f, 0.25f}, g = {0.5f, 0.125f, -1.5f};
  Tensor a = param_of(w0, DType::f16), b = param_of(w0, DType::f16);
  optim::SGD fp32(std::vector<Tensor>{a}, {.lr = 0.1, .momentum = 0.9});
  optim::SGD low(std::vector<Tensor>{b}, {.lr = 0.1, .momentum = 0.9, .fp32_state = false});
  for (int step = 0; step < 4; ++step) {
    set_grad(a, g);
    set_grad(b, g);
    fp32.step();
    low.step();
  }
  EXPECT_EQ(state_of(fp32).at("state.0.0.momentum_buffer").dtype(), DType::f32);
  Tensor buf = state_of(low).at("state.0.0.momentum_buffer");
  EXPECT_EQ(buf.dtype(), DType::f16);
  // buf after 4 steps with a constant gradient: g * (1 + 0.9 + 0.81 + 0.729) = 3.439 g.
  std::vector<double> want;
  for (float x : g) want.push_back(3.439 * x);
  expect_close(buf, want, 2e-3, 2e-3);
  expect_close(b, a.to(DType::f64).to_vector<double>(), 2e-3, 2e-3);
}

TEST(OptimStateDtype, SavedStateMustMatchTheStateDtype) {
  Tensor a = param_of({1.f, 2.f}, DType::bf16), b = param_of({1.f, 2.f}, DType::bf16);
  optim::Adam fp32(std::vector<Tensor>{a}, {.lr = 0.01});
  optim::Adam low(std::vector<Tensor>{b}, {.lr = 0.01, .fp32_state = false});
  set_grad(a, {0.5f, -0.5f});
  set_grad(b, {0.5f, -0.5f});
  fp32.step();
  low.step();
  VOLT_EXPECT_ERROR(low.load_state_dict(fp32.state_dict()), "Adam.load_state_dict", "exp_avg", "float32",
                    "bfloat16");
  VOLT_EXPECT_ERROR(fp32.load_state_dict(low.state_dict()), "Adam.load_state_dict", "bfloat16", "float32");
  // A round trip through state_dict keeps the low-precision state.
  Tensor c = param_of({1.f, 2.f}, DType::bf16);
  optim::AdamW again(std::vector<Tensor>{c}, {.lr = 0.01, .fp32_state = false});
  EXPECT_FALSE(again.fp32_state());
  optim::Adam copy(std::vector<Tensor>{c}, {.lr = 0.01, .fp32_state = false});
  copy.load_state_dict(low.state_dict());
  EXPECT_EQ(state_of(copy).at("state.0.0.exp_avg").dtype(), DType::bf16);
  EXPECT_EQ(state_of(copy).at("state.0.0.exp_avg").to(DType::f32).to_vector<float>(),
            state_of(low).at("state.0.0.exp_avg").to(DType::f32).to_vector<float>());
}
