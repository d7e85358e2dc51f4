// Op table rows (see op_table.h): random numbers, dropout and optimizer steps.
//
// rand / randn must be bit-identical across devices for the same (seed, offset) (kernels/common/philox.h);
// dropout keeps element i exactly when rand_with_seed(...)[i] >= p, whatever the dtype and device, so its
// output is compared with the f64 reference (the same mask) and its mask bit for bit across devices.
// Optimizer rows run three steps of each optimizer in nn/optim.h (the fused kernels in kernels/cpu/optim.cpp
// and kernels/cuda/optim.cu) and compare the parameters and the optimizer state.
#include <cmath>

#include "kernels/op_table/op_table.h"
#include <volt/nn/clip_grad.h>
#include <volt/nn/optim.h>

namespace volt::optable {
namespace {

using D = DType;

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

constexpr double kDropP = 0.3;
Tensor drop(const Tensor& x) {
  Generator g(70);
  g.set_offset(5);
  return dropout(x, kDropP, true, &g);
}

// Runs three steps of `opt` over a copy of param x[0] with gradients x[1], x[2], x[3]; returns the parameter
// followed by every state tensor (flattened, in the parameter's dtype).
template <class Opt, class Options>
Tensor optim_steps(const Inputs& x, const Options& options) {
  Tensor p = x[0].detach().clone().set_requires_grad();
  Opt opt(std::vector<Tensor>{p}, options);
  for (int s = 1; s <= 3; ++s) {
    p.set_grad(x[static_cast<size_t>(s)].detach().clone());
    opt.step();
  }
  std::vector<Tensor> parts{p.detach().flatten()};
  for (const auto& [name, t] : opt.state_dict())
    if (t.numel() == p.numel()) parts.push_back(cast(t, p.dtype()).flatten());
  return cat(parts);
}

std::vector<In> optim_inputs() { return {U({3, 5}), U({3, 5}), U({3, 5}), U({3, 5})}; }

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- random numbers ------------------------------------------------------------------------------------
  r.push_back(row("rand_with_seed", FWD(rand_with_seed({1001}, 1234, 7, c.dtype, c.device)))
                  .random()
                  .stats([](const Inputs&, const Tensor& out) {
                    std::vector<double> v = out.to_vector<double>();
                    for (double u : v) ASSERT_TRUE(u >= 0.0 && u <= 1.0) << u;
                    EXPECT_NEAR(mean_of(v), 0.5, 0.05);
                    EXPECT_NEAR(std_of(v), std::sqrt(1.0 / 12.0), 0.03);
                  }));
  r.push_back(row("randn_with_seed", FWD(randn_with_seed({1001}, 99, 3, c.dtype, c.device)))
                  .random()
                  .stats([](const Inputs&, const Tensor& out) {
                    std::vector<double> v = out.to_vector<double>();
                    EXPECT_NEAR(mean_of(v), 0.0, 0.1);
                    EXPECT_NEAR(std_of(v), 1.0, 0.1);
                  }));
  r.push_back(row("rand_generator_range", FWD_BLOCK {
                    Generator g(42);
                    g.set_offset(11);
                    rand({5}, c.dtype, c.device, &g);  // advances the offset: the next draw starts later
                    return rand({3, 67}, c.dtype, c.device, &g, -2.0, 3.0);
                  })
                  .random()
                  .stats([](const Inputs&, const Tensor& out) {
                    std::vector<double> v = out.to_vector<double>();
                    for (double u : v) ASSERT_TRUE(u >= -2.0 && u <= 3.0) << u;
                    EXPECT_NEAR(mean_of(v), 0.5, 0.3);
                  }));
  r.push_back(row("randn_generator_scaled", FWD_BLOCK {
                    Generator g(43);
                    randn({7}, c.dtype, c.device, &g);
                    return randn({2, 301}, c.dtype, c.device, &g, 1.0, 0.5);
                  })
                  .random()
                  .stats([](const Inputs&, const Tensor& out) {
                    std::vector<double> v = out.to_vector<double>();
                    EXPECT_NEAR(mean_of(v), 1.0, 0.08);
                    EXPECT_NEAR(std_of(v), 0.5, 0.06);
                  }));

  // ---- dropout -------------------------------------------------------------------------------------------
  r.push_back(row("dropout", FWD(drop(x[0])), {U({40, 25}, 1, 2)})
                  .stats([](const Inputs& in, const Tensor& out) {
                    std::vector<double> xv = in[0].to_vector<double>(), ov = out.to_vector<double>();
                    std::vector<double> u = rand_with_seed(out.shape(), 70, 5, D::f32).to_vector<double>();
                    int64_t dropped = 0;
                    for (size_t i = 0; i < ov.size(); ++i) {
                      const bool keep = u[i] >= kDropP;
                      ASSERT_EQ(ov[i] != 0.0, keep) << "element " << i << ": the mask is not rand_with_seed >= p";
                      if (!keep) ++dropped;
                      else EXPECT_NEAR(ov[i], xv[i] / (1 - kDropP), 2e-2 * ov[i]) << "element " << i;
                    }
                    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(ov.size()), kDropP, 0.04);
                  }));
  // The mask alone, bit for bit on every device and dtype.
  r.push_back(row("dropout_mask", FWD(ne(drop(x[0]), 0.0)), {U({7, 33}, 1, 2)}).no_grad().exact()
                  .bitwise_across_devices());
  r.push_back(row("dropout_transposed", FWD(drop(x[0])), {U({9, 6}, -1, 1).view(transposed)}));

  // ---- optimizers: three steps each ------------------------------------------------------------------------
  // Half parameters are rounded after every step (their state stays f32): wider tolerances.
  r.push_back(row("sgd", FWD((optim_steps<optim::SGD>(x, optim::SGDOptions{.lr = 0.1}))), optim_inputs())
                  .no_grad().tol(2));
  r.push_back(row("sgd_momentum_dampening_wd", FWD((optim_steps<optim::SGD>(
                      x, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("sgd_nesterov_wd", FWD((optim_steps<optim::SGD>(
                      x, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adam", FWD((optim_steps<optim::Adam>(x, optim::AdamOptions{.lr = 0.05}))), optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adam_wd_amsgrad", FWD((optim_steps<optim::Adam>(
                      x, optim::AdamOptions{.lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = 0.1,
                                            .amsgrad = true}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adamw", FWD((optim_steps<optim::AdamW>(x, optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adamw_amsgrad", FWD((optim_steps<optim::AdamW>(
                      x, optim::AdamWOptions{.lr = 0.05, .betas = {0.85, 0.95}, .amsgrad = true}))),
                  optim_inputs())
                  .no_grad().tol(3));
  // Gradient clipping (nn/clip_grad.h) rescales gradients in place: the clipped gradient, then the norm.
  r.push_back(row("clip_grad_norm", FWD_BLOCK {
                    Tensor p = x[0].detach().clone().set_requires_grad();
                    p.set_grad(x[1].detach().clone());
                    const double n = nn::clip_grad_norm_({p}, 0.5);
                    return cat({p.grad().flatten(), full({1}, n, p.dtype(), p.device())});
                  },
                  {U({3, 5}), U({3, 5})})
                  .no_grad().tol(2));
});

}  // namespace
}  // namespace volt::optable
