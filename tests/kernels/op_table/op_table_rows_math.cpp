// Op table rows (see op_table.h): the math ops of kernels/math_ops.h: sin, cos, erf, log1p, expm1, softplus,
// elu, mish, floor and round (gradient zero), linspace and randint; every differentiable row has DoubleBackward.
// tests/kernels/test_math_ops.cpp checks what the table does not: branches, ties, endpoints, errors.
#include <cmath>

#include "kernels/op_table/op_table.h"
#include <volt/kernels/math_ops.h>

namespace volt::optable {
namespace {

using D = DType;

// Exact halves and quarters in [-4, 4]: ties of round (half to even), exact in every float type.
Tensor halves_and_quarters() {
  std::vector<double> v;
  for (int k = -16; k <= 16; ++k) v.push_back(0.25 * k);
  return from_vector<double>(v, {33});
}

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- smooth functions --------------------------------------------------------------------------------
  r.push_back(row("sin", FWD(sin(x[0])), {U({3, 4}, -4, 4)}));
  r.push_back(row("sin_transposed", FWD(sin(x[0])), {U({5, 3}, -3, 3).view(transposed)}));
  r.push_back(row("cos", FWD(cos(x[0])), {U({3, 4}, -4, 4)}));
  r.push_back(row("cos_sliced", FWD(cos(x[0])), {U({4, 6}, -3, 3).view([](const Tensor& t) {
                    return t.slice(1, 1, 6, 2);
                  })}));
  r.push_back(row("erf", FWD(erf(x[0])), {U({3, 4}, -2.5, 2.5)}));
  r.push_back(row("log1p", FWD(log1p(x[0])), {U({3, 4}, -0.5, 2)}));
  r.push_back(row("log1p_expanded", FWD(log1p(x[0])), {U({1, 3}, -0.5, 2).view([](const Tensor& t) {
                    return t.expand({4, 3});
                  })}));
  r.push_back(row("expm1", FWD(expm1(x[0])), {U({3, 4}, -2, 2)}));
  // sin(x) * cos(x): one leaf reaching two ops whose gradients meet
  r.push_back(row("sin_times_cos", FWD(mul(sin(x[0]), cos(x[0]))), {U({3, 4}, -3, 3)}));

  // ---- activations ---------------------------------------------------------------------------------------
  r.push_back(row("softplus", FWD(softplus(x[0])), {U({3, 4}, -4, 4)}));
  // beta 2, threshold 3: inputs above 1.5 take the linear branch
  r.push_back(row("softplus_beta_threshold", FWD(softplus(x[0], 2.0, 3.0)), {U({4, 5}, -3, 3)}));
  r.push_back(row("elu", FWD(elu(x[0])), {U({3, 4}, -3, 2)}));
  r.push_back(row("elu_alpha", FWD(elu(x[0], 0.5)), {U({3, 4}, -3, 2)}));
  r.push_back(row("mish", FWD(mish(x[0])), {U({3, 4}, -4, 4)}));
  r.push_back(row("mish_permuted", FWD(mish(x[0])), {U({2, 3, 4}, -3, 3).view([](const Tensor& t) {
                    return t.permute({2, 0, 1});
                  })}));

  // ---- rounding: exact outputs, gradient zero (and so second derivative zero) ------------------------------
  r.push_back(row("floor", FWD(floor(x[0])), {U({3, 4}, -3, 3)}).exact());
  r.push_back(row("round", FWD(round(x[0])), {U({3, 4}, -3, 3)}).exact());
  r.push_back(row("round_ties", FWD(round(x[0])), {Custom(halves_and_quarters)}).no_grad().exact());
  r.push_back(row("floor_ties", FWD(floor(x[0])), {Custom(halves_and_quarters)}).no_grad().exact());
  r.push_back(row("floor_transposed", FWD(floor(x[0])), {U({5, 3}, -3, 3).view(transposed)})
                  .exact());
  // Gradients through a composition: x * round(x) has gradient round(x).
  r.push_back(row("x_times_round", FWD(mul(x[0], round(x[0]))), {U({3, 4}, -3, 3)}));

  // ---- factories ---------------------------------------------------------------------------------------
  // Multiples of 7/16: exact in every dtype, and the same bits on every device.
  r.push_back(row("linspace", FWD(linspace(-1.5, 2.0, 9, c.dtype, c.device))).no_grad().exact()
                  .bitwise_across_devices());
  r.push_back(row("linspace_inexact", FWD(linspace(0.1, 1.0, 37, c.dtype, c.device))).no_grad()
                  .bitwise_across_devices());
  r.push_back(row("linspace_i64", FWD(linspace(-3.0, 10.0, 7, D::i64, c.device))).no_grad().exact()
                  .bitwise_across_devices().only({D::f32}));
  r.push_back(row("randint_with_seed", FWD(randint_with_seed(-7, 13, {1001}, 1234, 7, c.dtype, c.device)))
                  .random()
                  .stats([](const Inputs&, const Tensor& out) {
                    std::vector<double> v = out.to_vector<double>();
                    double mean = 0;
                    for (double u : v) {
                      ASSERT_TRUE(u >= -7 && u < 13 && u == std::floor(u)) << u;
                      mean += u / static_cast<double>(v.size());
                    }
                    EXPECT_NEAR(mean, 2.5, 0.5);
                  }));
  r.push_back(row("randint_i64_generator", FWD_BLOCK {
                    Generator g(42);
                    g.set_offset(11);
                    randint(5, {5}, D::i64, c.device, &g);  // advances the offset: the next draw starts later
                    return randint(-1000000007, 1000000007, {3, 67}, D::i64, c.device, &g);
                  })
                  .random()
                  .only({D::f32})
                  .stats([](const Inputs&, const Tensor& out) {
                    for (double u : out.to_vector<double>()) ASSERT_TRUE(u >= -1000000007 && u < 1000000007) << u;
                  }));
});

}  // namespace
}  // namespace volt::optable
