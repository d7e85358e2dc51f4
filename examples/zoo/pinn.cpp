// A physics-informed network (Raissi et al.) for the 1-D Poisson problem u''(x) = f(x) on [0, 1] with
// u(0) = u(1) = 0 and f(x) = -pi^2 sin(pi x), whose solution is u(x) = sin(pi x). A tanh MLP u(x) is trained on
// random collocation points to make the residual u'' - f vanish, plus a boundary term; u' and u'' are derivatives
// of the output with respect to the input, taken by two autograd::grad calls with create_graph, so the training
// gradient differentiates through them (third derivatives of the network).
//
//   build/examples/zoo/zoo_pinn [--steps 1500] [--accelerator cpu|gpu] [--check]
// --check, in f64: (1) autograd's u'(x) and u''(x) at 8 points match the central differences
// (u(x+h) - u(x-h)) / 2h and (u(x+h) - 2u(x) + u(x-h)) / h^2 (h 1e-5 and 1e-4; rtol 1e-5, atol 1e-6); (2) the
// loss's gradients with respect to four parameters match central differences of the loss (rtol 1e-5); after
// training, the loss falls to at most 0.001 x its first value (last 20 steps vs the first 20) and u is within
// 0.03 of sin(pi x) on a grid of 101 points (measured over 3 seeds: loss ~45 -> 0.0004-0.002, max error
// 0.004-0.013, under 1 s).
#include <cmath>
#include <random>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>
#include <volt/kernels/grad.h>
#include <volt/nn/nn.h>
#include <volt/trainer/train_module.h>
#include "examples/zoo/zoo_check.h"

using namespace volt;

namespace {

constexpr int64_t kHidden = 32;
constexpr double kBoundaryWeight = 10;

double source(double x) { return -M_PI * M_PI * std::sin(M_PI * x); }  // f
double solution(double x) { return std::sin(M_PI * x); }               // u

// N random collocation points x (N, 1) in [0, 1] and f(x) (N, 1).
std::pair<Tensor, Tensor> collocation_points(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(n)), f(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) f[i] = source(x[i] = uniform(rng));
  return {from_vector<double>(x, {n, 1}).to(DType::f32), from_vector<double>(f, {n, 1}).to(DType::f32)};
}

struct Pinn : TrainModule {
  nn::Sequential net{std::make_shared<nn::Linear>(1, kHidden), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(kHidden, 1)};
  zoo::LossCurve curve;

  Pinn() { register_module("net", net); }
  std::string type_name() const override { return "Pinn"; }

  // u, u' and u'' at the points x (N, 1); the derivatives keep their graphs. Each u(x_i) depends on x_i only,
  // so the gradient of sum(u) with respect to x holds every u'(x_i).
  struct Derivatives {
    Tensor u, du, d2u;
  };
  Derivatives derivatives(const Tensor& points) {
    Tensor x = points.detach().requires_grad_();
    Tensor u = net(x);
    Tensor du = autograd::grad(sum(u), x, Tensor(), {.create_graph = true});
    Tensor d2u = autograd::grad(sum(du), x, Tensor(), {.create_graph = true});
    return {u, du, d2u};
  }
  // mean residual^2 over the points + weight * (u(0)^2 + u(1)^2).
  Tensor loss_of(const Tensor& x, const Tensor& f) {
    Tensor residual = derivatives(x).d2u - f;
    Tensor ends = net(from_vector<double>({0.0, 1.0}, {2, 1}).to(x.dtype()).to(x.device()));
    return mean(square(residual)) + sum(square(ends)) * kBoundaryWeight;
  }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = loss_of(b.input, b.target);
    curve.record(loss);
    log("train_loss", loss);
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = 3e-3}); }
};

}  // namespace

int main(int argc, char** argv) {
  const zoo::Args args = zoo::parse_args(argc, argv, "zoo_pinn", 1500);
  return zoo::run("pinn", [&] {
    seed_everything(args.seed);
    const auto [xs, fs] = collocation_points(1024, args.seed + 1);
    bool ok = true;
    if (args.check) {
      Pinn m;
      m.to(DType::f64);
      const Tensor x = xs.narrow(0, 0, 8).to(DType::f64), f = fs.narrow(0, 0, 8).to(DType::f64);
      // (1) u' and u'' from autograd vs central differences of u.
      const auto d = m.derivatives(x);
      auto u_at = [&](double shift) {
        NoGradGuard ng;
        return m.net(x + shift).to_vector<double>();
      };
      const double h1 = 1e-5, h2 = 1e-4;
      const std::vector<double> p1 = u_at(h1), m1 = u_at(-h1), p2 = u_at(h2), m2 = u_at(-h2), u0 = u_at(0);
      std::vector<double> fd1(8), fd2(8);
      for (size_t i = 0; i < 8; ++i) {
        fd1[i] = (p1[i] - m1[i]) / (2 * h1);
        fd2[i] = (p2[i] - 2 * u0[i] + m2[i]) / (h2 * h2);
      }
      ok &= zoo::check_close("pinn: u'(x) vs central differences of u", d.du.to_vector<double>(), fd1, 1e-5, 1e-6);
      ok &= zoo::check_close("pinn: u''(x) vs second central differences of u", d.d2u.to_vector<double>(), fd2, 1e-5,
                             1e-6);
      // (2) the loss's parameter gradients, through both create_graph gradients.
      ok &= zoo::check_gradients("pinn", m, {"net.0.weight", "net.0.bias", "net.2.weight", "net.4.weight"},
                                 [&] { return m.loss_of(x, f); });
    }
    Pinn model;
    auto loader = std::make_shared<data::DataLoader>(
        std::make_shared<data::TensorDataset>(xs, fs),
        data::DataLoaderOptions{.batch_size = 64, .shuffle = true, .drop_last = true, .seed = args.seed});
    Trainer trainer(zoo::trainer_options(args));
    trainer.fit(model, loader);
    if (args.check) {
      ok &= zoo::check_loss_fell("pinn", model.curve, 20, 0.001);
      model.to(kCPU);
      NoGradGuard ng;
      std::vector<double> grid(101);
      for (size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<double>(i) / 100;
      const std::vector<double> u = model.net(from_vector<double>(grid, {101, 1}).to(DType::f32)).to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < grid.size(); ++i) worst = std::max(worst, std::abs(u[i] - solution(grid[i])));
      const bool close = worst <= 0.03;
      std::printf("pinn: max |u(x) - sin(pi x)| on 101 points %.4f, required <= 0.03: %s\n", worst,
                  close ? "ok" : "FAILED");
      ok &= close;
    }
    return ok;
  });
}
