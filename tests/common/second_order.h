#pragma once
// Test helper: second derivatives (autograd::grad with create_graph) against central finite differences of first
// derivatives, in float64. Kept apart from gradcheck.h so that the many tests including that one do not rebuild.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>

#include "common/gradcheck.h"

namespace volt::testing {

// Second derivatives: with fixed random weightings w (of the output) and v_k (of each first gradient), checks
// the gradient of S(x) = sum_k sum(v_k * d(sum(f(x) * w))/dx_k), taken with autograd::grad(create_graph = true)
// and then differentiated again, against central differences of S computed from first gradients alone.
inline void expect_second_derivatives_match(const TensorFn& f, std::vector<Tensor> inputs, double eps = 1e-6,
                                            double atol = 1e-6, double rtol = 1e-5) {
  std::vector<size_t> diff;  // the inputs that require grad
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].requires_grad()) diff.push_back(k);
  ASSERT_FALSE(diff.empty()) << "no input requires grad";
  Tensor w;
  std::vector<Tensor> v;
  {
    Generator g(2468);
    Tensor out;
    {
      NoGradGuard ng;
      out = f(inputs);
    }
    w = rand(out.shape(), DType::f64, kCPU, &g, 0.5, 1.5);
    for (size_t k : diff) v.push_back(rand(inputs[k].shape(), DType::f64, kCPU, &g, -1.0, 1.0));
  }
  // S(x), with the first gradients recorded (create_graph) or not.
  auto s_of = [&](const std::vector<Tensor>& in, bool create_graph) {
    std::vector<Tensor> wrt;
    for (size_t k : diff) wrt.push_back(in[k]);
    Tensor loss = sum(mul(f(in).to(DType::f64), w));
    std::vector<Tensor> g1 = autograd::grad({loss}, wrt, {}, {.create_graph = create_graph, .materialize_grads = true});
    Tensor s = zeros({}, DType::f64, kCPU);
    for (size_t j = 0; j < diff.size(); ++j) s = add(s, sum(mul(g1[j].to(DType::f64), v[j])));
    return s;
  };
  Tensor s = s_of(inputs, true);
  std::vector<Tensor> wrt;
  for (size_t k : diff) wrt.push_back(inputs[k]);
  std::vector<Tensor> analytic;
  if (s.requires_grad()) {
    analytic = autograd::grad({s}, wrt, {}, {.materialize_grads = true});
  } else {  // the first gradient does not depend on the inputs (a linear op): the second derivative is zero
    for (const Tensor& x : wrt) analytic.push_back(zeros_like(x));
  }
  for (size_t j = 0; j < diff.size(); ++j) {
    const size_t k = diff[j];
    std::vector<double> a = analytic[j].to(DType::f64).to_vector<double>();
    Tensor base = inputs[k].detach().contiguous().clone();
    double* p = base.data<double>();
    for (int64_t i = 0; i < base.numel(); ++i) {
      double orig = p[i];
      auto eval = [&](double value) {
        p[i] = value;
        std::vector<Tensor> in = inputs;
        in[k] = base.clone().set_requires_grad(true);
        return s_of(in, false).item();
      };
      double up = eval(orig + eps), down = eval(orig - eps);
      p[i] = orig;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(a[static_cast<size_t>(i)], numeric, atol + rtol * std::abs(numeric))
          << "second derivative: input " << k << " element " << i;
    }
  }
}

}  // namespace volt::testing
