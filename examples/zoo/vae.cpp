// Variational autoencoder (Kingma & Welling) on synthetic 8x8 binary images of bars: an MLP encoder gives the
// mean and log-variance of a 4-d latent Gaussian, z = mu + exp(logvar / 2) * eps (the reparameterisation trick),
// an MLP decoder gives Bernoulli logits, and the loss is the reconstruction BCE-with-logits summed over pixels
// plus KL(q(z|x) || N(0, I)), averaged over the batch.
//
//   build/examples/zoo/zoo_vae [--steps 1500] [--accelerator cpu|gpu] [--check]
// --check: gradients of four parameters match central differences in f64 (rtol 1e-5), and the loss falls to at
// most 0.6 x its first value (mean of the last 20 steps vs the first 20; measured: 39.0 -> 16.4, under 1 s).
#include <random>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>
#include <volt/nn/losses.h>
#include <volt/nn/nn.h>
#include <volt/trainer/train_module.h>
#include "examples/zoo/zoo_check.h"

using namespace volt;

namespace {

constexpr int64_t kSide = 8, kPixels = kSide * kSide, kLatent = 4, kHidden = 64;

// N images, each with one to three full horizontal or vertical bars: a distribution with few degrees of freedom.
Tensor bar_images(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> px(static_cast<size_t>(n * kPixels), 0.f);
  for (int64_t s = 0; s < n; ++s) {
    const int bars = 1 + static_cast<int>(rng() % 3);
    for (int b = 0; b < bars; ++b) {
      const bool vertical = rng() % 2;
      const int64_t at = static_cast<int64_t>(rng() % kSide);
      for (int64_t k = 0; k < kSide; ++k)
        px[static_cast<size_t>(s * kPixels + (vertical ? k * kSide + at : at * kSide + k))] = 1.f;
    }
  }
  return from_vector<float>(px, {n, kPixels});
}

struct Vae : TrainModule {
  nn::Linear enc{kPixels, kHidden}, mu{kHidden, kLatent}, logvar{kHidden, kLatent};
  nn::Linear dec1{kLatent, kHidden}, dec2{kHidden, kPixels};
  zoo::LossCurve curve;

  Vae() {
    register_module("enc", enc);
    register_module("mu", mu);
    register_module("logvar", logvar);
    register_module("dec1", dec1);
    register_module("dec2", dec2);
  }
  std::string type_name() const override { return "Vae"; }

  // x (B, 64) in {0, 1}, eps (B, latent) standard normal -> the negative ELBO per sample.
  Tensor loss_of(const Tensor& x, const Tensor& eps) {
    Tensor h = enc(x).relu();
    Tensor m = mu(h), lv = logvar(h);
    Tensor z = m + exp(lv * 0.5) * eps;
    Tensor logits = dec2(dec1(z).relu());
    const double batch = static_cast<double>(x.size(0));
    Tensor reconstruction = nn::binary_cross_entropy_with_logits(logits, x, Tensor(), Reduction::Sum) / batch;
    Tensor kl = sum((lv + 1.0 - m * m - exp(lv)) * -0.5) / batch;
    return reconstruction + kl;
  }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = loss_of(b.input, randn({b.input.size(0), kLatent}, b.input.dtype(), b.input.device()));
    curve.record(loss);
    log("train_loss", loss);
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = 3e-3}); }
};

}  // namespace

int main(int argc, char** argv) {
  const zoo::Args args = zoo::parse_args(argc, argv, "zoo_vae", 1500);
  return zoo::run("vae", [&] {
    seed_everything(args.seed);
    const Tensor images = bar_images(1024, args.seed + 1);
    bool ok = true;
    if (args.check) {  // a fresh model in f64, a fixed batch and fixed noise
      Vae m;
      m.to(DType::f64);
      const Tensor x = images.narrow(0, 0, 8).to(DType::f64), eps = randn({8, kLatent}, DType::f64);
      ok &= zoo::check_gradients("vae", m, {"enc.weight", "mu.bias", "logvar.weight", "dec2.weight"},
                                 [&] { return m.loss_of(x, eps); });
    }
    Vae model;
    auto loader = std::make_shared<data::DataLoader>(
        std::make_shared<data::TensorDataset>(images, Tensor()),
        data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .drop_last = true, .seed = args.seed});
    Trainer trainer(zoo::trainer_options(args));
    trainer.fit(model, loader);
    if (args.check) ok &= zoo::check_loss_fell("vae", model.curve, 20, 0.6);
    return ok;
  });
}
