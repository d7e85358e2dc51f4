// ResNet-18 (He et al.) in its CIFAR form, on synthetic CIFAR-sized images (3x32x32, 10 classes): a 3x3 stem
// conv (no max-pool), four stages of two BasicBlocks (3x3 conv - BN - ReLU - 3x3 conv - BN, plus the identity or
// a strided 1x1 conv - BN "downsample" shortcut, then ReLU) with strides 1, 2, 2, 2, global average pooling and a
// linear classifier. The widths are 1/8 of the original (8-16-32-64 channels instead of 64-512) so that CPU
// training in CI takes seconds; the layer structure and parameter names follow torchvision's resnet18.
// Training samples are augmented per epoch with a random 32x32 crop of the 4-pixel zero-padded image and a
// random horizontal flip (data/transforms.h), as in the usual CIFAR recipe.
//
//   build/examples/zoo/zoo_resnet18 [--steps 60] [--accelerator cpu|gpu] [--check]
// --check: gradients of the stem, a BN scale, a downsample conv and the classifier match central differences in
// f64 (h 1e-7, rtol 1e-5); the cross-entropy falls to at most 0.25 x its first value (last 10 steps vs the first
// 10; measured over 3 seeds: ~2.0 -> 0.03-0.15, ~5 s on an idle core).
#include <random>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>
#include <volt/data/transforms.h>
#include <volt/nn/layers/adaptive_pool.h>
#include <volt/nn/nn.h>
#include <volt/trainer/train_module.h>
#include "examples/zoo/zoo_check.h"

using namespace volt;

namespace {

constexpr int64_t kClasses = 10, kWidth = 8;

// N images (N, 3, 32, 32): one of ten smooth random colour templates (3x4x4 blown up 8x) plus pixel noise.
std::pair<Tensor, Tensor> template_images(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> templates(kClasses * 3 * 4 * 4);
  for (float& v : templates) v = normal(rng);
  std::vector<float> px(static_cast<size_t>(n * 3 * 32 * 32));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) {
    const int64_t c = static_cast<int64_t>(rng() % kClasses);
    labels[static_cast<size_t>(s)] = c;
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t r = 0; r < 32; ++r)
        for (int64_t q = 0; q < 32; ++q)
          px[static_cast<size_t>(((s * 3 + ch) * 32 + r) * 32 + q)] =
              templates[static_cast<size_t>(((c * 3 + ch) * 4 + r / 8) * 4 + q / 8)] + 0.5f * normal(rng);
  }
  return {from_vector<float>(px, {n, 3, 32, 32}), from_vector<int64_t>(labels, {n})};
}

struct BasicBlock : nn::UnaryModule {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // 1x1 conv + BN when the shape changes, else none (identity)

  BasicBlock(int64_t in, int64_t out, int64_t stride)
      : conv1(in, out, 3, stride, 1, /*bias=*/false), conv2(out, out, 3, 1, 1, /*bias=*/false), bn1(out), bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out)
      downsample = register_module(
          "downsample", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
                            std::make_shared<nn::Conv2d>(in, out, 1, stride, 0, /*bias=*/false),
                            std::make_shared<nn::BatchNorm2d>(out)}));
  }
  std::string type_name() const override { return "BasicBlock"; }
  Tensor forward(const Tensor& x) override {
    Tensor out = bn2(conv2(bn1(conv1(x)).relu()));
    return (out + (downsample ? (*downsample)(x) : x)).relu();
  }
};

struct ResNet18 : TrainModule {
  nn::Conv2d conv1{3, kWidth, 3, 1, 1, /*bias=*/false};
  nn::BatchNorm2d bn1{kWidth};
  nn::Sequential layer1, layer2, layer3, layer4;
  nn::AdaptiveAvgPool2d pool{1};  // (B, C, H, W) -> (B, C, 1, 1)
  nn::Linear fc{8 * kWidth, kClasses};
  zoo::LossCurve curve;

  ResNet18() {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    nn::Sequential* stages[] = {&layer1, &layer2, &layer3, &layer4};
    int64_t in = kWidth;
    for (int i = 0; i < 4; ++i) {
      const int64_t out = kWidth << i;
      stages[i]->push_back(std::make_shared<BasicBlock>(in, out, i == 0 ? 1 : 2));
      stages[i]->push_back(std::make_shared<BasicBlock>(out, out, 1));
      register_module("layer" + std::to_string(i + 1), *stages[i]);
      in = out;
    }
    register_module("avgpool", pool);
    register_module("fc", fc);
  }
  std::string type_name() const override { return "ResNet18"; }

  Tensor forward(const Tensor& x) {  // (B, 3, 32, 32) -> logits (B, 10)
    Tensor h = bn1(conv1(x)).relu();
    h = layer4(layer3(layer2(layer1(h))));  // (B, 64, 4, 4)
    return fc(pool(h).flatten(1));
  }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = cross_entropy(forward(b.input), b.target);
    curve.record(loss);
    log("train_loss", loss);
    return loss;
  }
  Optimizers configure_optimizers() override {
    return optim::SGD(parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  }
};

}  // namespace

int main(int argc, char** argv) {
  const zoo::Args args = zoo::parse_args(argc, argv, "zoo_resnet18", 60);
  return zoo::run("resnet18", [&] {
    seed_everything(args.seed);
    const auto [images, labels] = template_images(1024, args.seed + 1);
    bool ok = true;
    if (args.check) {  // a fresh model in f64 (BN in training mode: batch statistics) on a fixed batch of 2
      ResNet18 m;
      m.to(DType::f64);
      const Tensor x = images.narrow(0, 0, 2).to(DType::f64), y = labels.narrow(0, 0, 2);
      ok &= zoo::check_gradients(
          "resnet18", m,
          {"conv1.weight", "layer1.0.bn1.weight", "layer3.0.downsample.0.weight", "layer4.1.conv2.weight", "fc.weight"},
          [&] { return cross_entropy(m.forward(x), y); },
          // ~100k ReLUs: at h = 1e-6 one of them sometimes crosses its kink inside the step
          {.h = 1e-7});
    }
    ResNet18 model;
    auto loader = std::make_shared<data::DataLoader>(
        std::make_shared<data::TensorDataset>(images, labels),
        data::DataLoaderOptions{
            .batch_size = 32,
            .shuffle = true,
            .drop_last = true,
            .seed = args.seed,
            .sample_transform = data::compose({data::random_crop(32, 32, 4), data::random_horizontal_flip()})});
    Trainer trainer(zoo::trainer_options(args));
    trainer.fit(model, loader);
    if (args.check) ok &= zoo::check_loss_fell("resnet18", model.curve, 10, 0.25);
    return ok;
  });
}
