// A DDPM-style denoising UNet (Ho et al.) trained on synthetic 16x16 images (bright squares of random size and
// place on a dark background, scaled to [-1, 1]). Training draws a step t of a 100-step linear beta schedule per
// image, noises it, x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps, and regresses the noise eps (MSE).
// The UNet: sinusoidal time embedding (sin and cos of t times geometric frequencies) through an MLP with SiLU;
// residual blocks (GroupNorm - SiLU - 3x3 conv, plus the time embedding projected per channel, GroupNorm - SiLU
// - 3x3 conv, 1x1 conv skip when the width changes); a strided-conv downsampling to 8x8, a self-attention block
// (GroupNorm, single-head attention over the 64 positions, output projection, residual) at 8x8, nearest-neighbour
// upsampling (nn::Upsample) + conv back to 16x16, the skip connection concatenated, and an output conv.
//
//   build/examples/zoo/zoo_ddpm_unet [--steps 150] [--accelerator cpu|gpu] [--check]
// --check: gradients of the time MLP, a GroupNorm scale, the attention's qkv projection, the upsampling conv and
// the output conv match central differences in f64 (rtol 1e-5); the noise-prediction loss falls to at most
// 0.3 x its first value (last 20 steps vs the first 20; measured over 3 seeds: 0.51-0.71 -> 0.076-0.083, 12-14 s).
#include <cmath>
#include <random>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>
#include <volt/kernels/math_ops.h>
#include <volt/nn/layers/upsample.h>
#include <volt/nn/nn.h>
#include <volt/trainer/train_module.h>
#include "examples/zoo/zoo_check.h"

using namespace volt;

namespace {

constexpr int64_t kSide = 16, kSteps = 100, kC = 16, kTimeDim = 32, kGroups = 4;

// N images (N, 1, 16, 16) in [-1, 1]: one square of side 3-8 at a random place.
Tensor square_images(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> px(static_cast<size_t>(n * kSide * kSide), -1.f);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t side = 3 + static_cast<int64_t>(rng() % 6), r0 = static_cast<int64_t>(rng() % (kSide - side + 1)),
                  c0 = static_cast<int64_t>(rng() % (kSide - side + 1));
    for (int64_t r = r0; r < r0 + side; ++r)
      for (int64_t c = c0; c < c0 + side; ++c) px[static_cast<size_t>((s * kSide + r) * kSide + c)] = 1.f;
  }
  return from_vector<float>(px, {n, 1, kSide, kSide});
}

// t (B) -> (B, dim): [sin(t f_0), ..., sin(t f_{dim/2-1}), cos(t f_0), ...], f_k = 10000^(-k / (dim/2)).
Tensor sinusoidal_embedding(const Tensor& t, int64_t dim) {
  const int64_t half = dim / 2;
  Tensor k = arange(half, t.dtype(), t.device());
  Tensor freqs = exp(k * (-std::log(10000.0) / static_cast<double>(half)));  // (half)
  Tensor args = t.unsqueeze(1) * freqs.unsqueeze(0);                         // (B, half)
  return cat({sin(args), cos(args)}, 1);
}

struct ResBlock : nn::Module {
  nn::GroupNorm norm1, norm2;
  nn::Conv2d conv1, conv2;
  nn::Linear time_proj;
  std::shared_ptr<nn::Conv2d> skip;  // 1x1 when the width changes

  ResBlock(int64_t in, int64_t out)
      : norm1(kGroups, in),
        norm2(kGroups, out),
        conv1(in, out, 3, 1, 1),
        conv2(out, out, 3, 1, 1),
        time_proj(kTimeDim, out) {
    register_module("norm1", norm1);
    register_module("conv1", conv1);
    register_module("time_proj", time_proj);
    register_module("norm2", norm2);
    register_module("conv2", conv2);
    if (in != out) skip = register_module("skip", std::make_shared<nn::Conv2d>(in, out, 1));
  }
  std::string type_name() const override { return "ResBlock"; }
  Tensor operator()(const Tensor& x, const Tensor& temb) {
    return call_scoped([&] { return forward(x, temb); });
  }
  Tensor forward(const Tensor& x, const Tensor& temb) {  // x (B, in, H, W), temb (B, time_dim)
    Tensor h = conv1(silu(norm1(x)));
    h = h + time_proj(silu(temb)).unsqueeze(2).unsqueeze(3);  // (B, out, 1, 1) broadcast over H, W
    h = conv2(silu(norm2(h)));
    return h + (skip ? (*skip)(x) : x);
  }
};

struct AttentionBlock : nn::UnaryModule {
  nn::GroupNorm norm;
  nn::Linear qkv, proj;
  explicit AttentionBlock(int64_t c) : norm(kGroups, c), qkv(c, 3 * c), proj(c, c) {
    register_module("norm", norm);
    register_module("qkv", qkv);
    register_module("proj", proj);
  }
  std::string type_name() const override { return "AttentionBlock"; }
  Tensor forward(const Tensor& x) override {  // (B, C, H, W)
    const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    Tensor h = norm(x).flatten(2).transpose(1, 2);  // (B, HW, C)
    Tensor q = qkv(h);                              // (B, HW, 3C)
    Tensor a = scaled_dot_product_attention(q.narrow(2, 0, C), q.narrow(2, C, C), q.narrow(2, 2 * C, C));
    return x + proj(a).transpose(1, 2).reshape({B, C, H, W});
  }
};

struct DdpmUnet : TrainModule {
  nn::Linear time1{kTimeDim, kTimeDim}, time2{kTimeDim, kTimeDim};
  nn::Conv2d conv_in{1, kC, 3, 1, 1};
  ResBlock down_block{kC, kC};
  nn::Conv2d downsample{kC, 2 * kC, 3, 2, 1};  // 16x16 -> 8x8
  ResBlock mid_block{2 * kC, 2 * kC};
  AttentionBlock attention{2 * kC};
  nn::Upsample upsample{nn::UpsampleOptions{.scale_factor = {2.0}}};  // nearest, 8x8 -> 16x16
  nn::Conv2d up_conv{2 * kC, kC, 3, 1, 1};
  ResBlock up_block{2 * kC, kC};  // after concatenating the skip
  nn::GroupNorm norm_out{kGroups, kC};
  nn::Conv2d conv_out{kC, 1, 3, 1, 1};
  std::vector<double> abar;  // cumulative products of (1 - beta_t)
  zoo::LossCurve curve;

  DdpmUnet() {
    register_module("time1", time1);
    register_module("time2", time2);
    register_module("conv_in", conv_in);
    register_module("down_block", down_block);
    register_module("downsample", downsample);
    register_module("mid_block", mid_block);
    register_module("attention", attention);
    register_module("upsample", upsample);
    register_module("up_conv", up_conv);
    register_module("up_block", up_block);
    register_module("norm_out", norm_out);
    register_module("conv_out", conv_out);
    double prod = 1;
    for (int64_t t = 0; t < kSteps; ++t) {
      prod *= 1 - (1e-4 + (0.02 - 1e-4) * static_cast<double>(t) / (kSteps - 1));
      abar.push_back(prod);
    }
  }
  std::string type_name() const override { return "DdpmUnet"; }

  Tensor forward(const Tensor& x, const Tensor& t) {  // x (B, 1, 16, 16), t (B) float -> predicted noise
    Tensor temb = time2(silu(time1(sinusoidal_embedding(t, kTimeDim))));
    Tensor skip = down_block(conv_in(x), temb);                // (B, C, 16, 16)
    Tensor h = attention(mid_block(downsample(skip), temb));   // (B, 2C, 8, 8)
    h = up_block(cat({up_conv(upsample(h)), skip}, 1), temb);  // (B, C, 16, 16)
    return conv_out(silu(norm_out(h)));
  }
  // The noise-prediction loss for clean images x0, steps t (B) i64 and noise eps.
  Tensor loss_of(const Tensor& x0, const Tensor& t, const Tensor& eps) {
    std::vector<double> a, s;
    for (int64_t step : t.to_vector<int64_t>()) {
      a.push_back(std::sqrt(abar[static_cast<size_t>(step)]));
      s.push_back(std::sqrt(1 - abar[static_cast<size_t>(step)]));
    }
    const Shape col{t.numel(), 1, 1, 1};
    Tensor xt = x0 * from_vector<double>(a, col).to(x0.dtype()).to(x0.device()) +
                eps * from_vector<double>(s, col).to(x0.dtype()).to(x0.device());
    return mse_loss(forward(xt, t.to(x0.dtype()).to(x0.device())), eps);
  }
  Tensor training_step(const Batch& b, int64_t) override {
    const Tensor& x0 = b.input;
    Tensor t = (rand({x0.size(0)}, DType::f32) * static_cast<double>(kSteps)).to(DType::i64);  // uniform in [0, T)
    Tensor loss = loss_of(x0, t, randn(x0.shape(), x0.dtype(), x0.device()));
    curve.record(loss);
    log("train_loss", loss);
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = 2e-3}); }
};

}  // namespace

int main(int argc, char** argv) {
  const zoo::Args args = zoo::parse_args(argc, argv, "zoo_ddpm_unet", 150);
  return zoo::run("ddpm_unet", [&] {
    seed_everything(args.seed);
    const Tensor images = square_images(1024, args.seed + 1);
    bool ok = true;
    if (args.check) {  // a fresh model in f64; fixed images, steps and noise
      DdpmUnet m;
      m.to(DType::f64);
      const Tensor x0 = images.narrow(0, 0, 2).to(DType::f64), eps = randn({2, 1, kSide, kSide}, DType::f64);
      const Tensor t = from_vector<int64_t>({7, 63}, {2});
      ok &= zoo::check_gradients("ddpm_unet", m,
                                 {"time1.weight", "down_block.norm1.weight", "mid_block.time_proj.weight",
                                  "attention.qkv.weight", "up_conv.weight", "conv_out.bias"},
                                 [&] { return m.loss_of(x0, t, eps); });
    }
    DdpmUnet model;
    auto loader = std::make_shared<data::DataLoader>(
        std::make_shared<data::TensorDataset>(images, Tensor()),
        data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .drop_last = true, .seed = args.seed});
    Trainer trainer(zoo::trainer_options(args));
    trainer.fit(model, loader);
    if (args.check) ok &= zoo::check_loss_fell("ddpm_unet", model.curve, 20, 0.3);
    return ok;
  });
}
