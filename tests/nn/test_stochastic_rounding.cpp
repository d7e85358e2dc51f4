// Stochastic rounding of bf16 parameters in the Adam/AdamW update (AdamHyper::stochastic_rounding,
// AdamOptions::stochastic_rounding): the rounding is unbiased, reproducible for a seed and step, limited to
// bf16, and lets updates smaller than half a bf16 step move the parameters where round-to-nearest stalls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include <volt/kernels/common/optim_math.h>
#include <volt/nn/nn.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/generator.h>

using namespace volt;

namespace {

double bf16_value(uint16_t bits) { return static_cast<double>(bf16_bits_to_float(bits)); }

// n bf16 parameters at `value`, gradients `grad`, fp32 moments: one Adam step with `h`.
Tensor adam_once(int64_t n, double value, double grad, const AdamHyper& h, Device device = kCPU) {
  Tensor p = full({n}, value, DType::bf16, device);
  Tensor g = full({n}, grad, DType::bf16, device);
  adam_step_(p, g, zeros({n}, DType::f32, device), zeros({n}, DType::f32, device), Tensor(), h);
  return p;
}

AdamHyper tiny_step(bool stochastic, uint64_t seed = 7, int64_t step = 1) {
  AdamHyper h;
  h.lr = 1e-4;  // far below half a bf16 step at 1.0 (2^-9 below 1, 2^-8 above)
  h.step = step;
  h.stochastic_rounding = stochastic;
  h.rounding_seed = seed;
  return h;
}

}  // namespace

TEST(StochasticRounding, UnbiasedOverEveryDroppedBitPattern) {
  // Over all 2^16 values of the bits that are added, f rounds up exactly (dropped bits) times: the mean of the
  // results is f itself, exactly.
  for (float f : {1.0f + 0x1p-10f, -3.14159274f, 0x1p-130f, 65504.5f, 0.1f, -2.5e-20f}) {
    double sum = 0;
    for (uint32_t r = 0; r < 65536; ++r) sum += bf16_value(optim_math::float_to_bf16_bits_stochastic(f, r));
    EXPECT_EQ(sum / 65536.0, static_cast<double>(f)) << f;
  }
  // A value bf16 holds exactly never moves.
  for (uint32_t r = 0; r < 65536; r += 97)
    EXPECT_EQ(bf16_value(optim_math::float_to_bf16_bits_stochastic(1.5f, r)), 1.5);
}

TEST(StochasticRounding, InfinityAndNanConvertAsRoundToNearest) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t r : {0u, 1u, 0xffffu, 0xffffffffu}) {
    EXPECT_EQ(optim_math::float_to_bf16_bits_stochastic(inf, r), float_to_bf16_bits(inf));
    EXPECT_EQ(optim_math::float_to_bf16_bits_stochastic(-inf, r), float_to_bf16_bits(-inf));
    EXPECT_TRUE(std::isnan(bf16_value(optim_math::float_to_bf16_bits_stochastic(std::nanf(""), r))));
  }
}

TEST(StochasticRounding, TinyAdamStepsMoveBf16ParametersOnAverage) {
  const int64_t n = 8192;
  // Round to nearest: an update of 1e-4 at 1.0 rounds away entirely.
  for (double v : adam_once(n, 1.0, 1.0, tiny_step(false)).to_vector<double>()) ASSERT_EQ(v, 1.0);
  // Stochastic: each parameter lands on 1 - 2^-8 with probability 1e-4 / 2^-8 and stays at 1 otherwise, so the
  // mean moves by 1e-4 (standard error of the mean about 7e-6 for 8192 parameters).
  const std::vector<double> p = adam_once(n, 1.0, 1.0, tiny_step(true)).to_vector<double>();
  int64_t down = 0;
  for (double v : p) {
    ASSERT_TRUE(v == 1.0 || v == 1.0 - 0x1p-8) << v;
    down += v != 1.0;
  }
  const double mean = std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(n);
  EXPECT_NEAR(mean, 1.0 - 1e-4, 4e-5);
  EXPECT_GT(down, 100);
  EXPECT_LT(down, 320);  // expected 8192 * 0.0256 = 210
}

TEST(StochasticRounding, SameSeedAndStepGiveTheSameParameters) {
  const auto a = adam_once(4096, 1.0, 1.0, tiny_step(true, 7, 1)).to_vector<double>();
  const auto b = adam_once(4096, 1.0, 1.0, tiny_step(true, 7, 1)).to_vector<double>();
  EXPECT_EQ(a, b);
  const auto other_step = adam_once(4096, 1.0, 1.0, tiny_step(true, 7, 2)).to_vector<double>();
  const auto other_seed = adam_once(4096, 1.0, 1.0, tiny_step(true, 8, 1)).to_vector<double>();
  EXPECT_NE(a, other_step);
  EXPECT_NE(a, other_seed);
}

TEST(StochasticRounding, OnlyBf16ParametersAreAffected) {
  for (DType dt : {DType::f16, DType::f32, DType::f64}) {
    auto run = [&](bool stochastic) {
      Tensor p = full({512}, 1.0, dt);
      Tensor g = full({512}, 0.3, dt);
      const DType state = dt == DType::f16 ? DType::f32 : dt;
      adam_step_(p, g, zeros({512}, state), zeros({512}, state), Tensor(), tiny_step(stochastic));
      return p.to_vector<double>();
    };
    EXPECT_EQ(run(true), run(false)) << dtype_name(dt);
  }
}

TEST(StochasticRounding, AdamWOnBf16TrainsWhereRoundToNearestStalls) {
  // Pull 256 parameters from 1.0 towards 0.99 with steps of about 1e-4 (a bf16 step below 1.0 is 2^-8):
  // in bf16, round to nearest never leaves 1.0, and stochastic rounding tracks the same run in f32.
  auto train = [](DType dt, bool stochastic) {
    manual_seed(3);
    Tensor p = full({256}, 1.0, dt).requires_grad_();
    optim::AdamW opt({p}, {.lr = 1e-4, .weight_decay = 0.0, .stochastic_rounding = stochastic});
    for (int s = 0; s < 100; ++s) {
      opt.zero_grad();
      ((p.to(DType::f32) - 0.99) * (p.to(DType::f32) - 0.99)).sum().backward();
      opt.step();
    }
    const auto v = p.to_vector<double>();
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  EXPECT_EQ(train(DType::bf16, false), 1.0);
  const double f32 = train(DType::f32, true);
  EXPECT_LT(f32, 0.995);
  const double mean = train(DType::bf16, true);
  EXPECT_NEAR(mean, f32, 1e-3) << "f32 reaches " << f32;
  EXPECT_EQ(train(DType::bf16, true), mean);  // reproducible under manual_seed
}

TEST(StochasticRounding, CudaMatchesCpuBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the CUDA update is compared with the CPU one on a GPU";
  for (int64_t step : {1, 2, 1000}) {
    const AdamHyper h = tiny_step(true, 11, step);
    EXPECT_EQ(adam_once(70000, 1.0, 0.7, h).to_vector<double>(),
              adam_once(70000, 1.0, 0.7, h, cuda_device(0)).to_vector<double>())
        << step;
  }
}
