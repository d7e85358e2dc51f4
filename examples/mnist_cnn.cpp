// A small convolutional net on MNIST-format data through the same Trainer:
// conv(1->16, 3x3) BN ReLU maxpool -> conv(16->32, 3x3) BN ReLU maxpool -> dropout -> linear(32*7*7 -> 10).
#include <iostream>

#include "data/data_module.h"
#include "examples/example_common.h"
#include "nn/functional.h"
#include "nn/metrics.h"
#include "nn/nn.h"
#include "nn/optim.h"
#include "trainer/trainer.h"

using namespace volt;

namespace {

struct MnistCnn : TrainModule {
  nn::Conv2d c1{1, 16, 3, 1, 1}, c2{16, 32, 3, 1, 1};
  nn::BatchNorm2d b1{16}, b2{32};
  nn::MaxPool2d pool{2};
  nn::Dropout drop{0.25};
  nn::Linear fc{32 * 7 * 7, 10};
  metrics::Accuracy val_acc{{.num_classes = 10}}, test_acc{{.num_classes = 10}};
  double lr;

  explicit MnistCnn(double lr_) : lr(lr_) {
    register_module("c1", c1);
    register_module("b1", b1);
    register_module("c2", c2);
    register_module("b2", b2);
    register_module("pool", pool);
    register_module("drop", drop);
    register_module("fc", fc);
    save_hyperparameters({{"learning_rate", lr}});
  }
  std::string type_name() const override { return "MnistCnn"; }

  Tensor forward(const Tensor& x) {  // x (B, 1, 28, 28)
    Tensor h = pool(b1(c1(x)).relu());  // (B, 16, 14, 14)
    h = pool(b2(c2(h)).relu());         // (B, 32, 7, 7)
    return fc(drop(h.flatten(1)));      // (B, 10)
  }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = cross_entropy(forward(b.input), b.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& b, int64_t) override {
    val_acc.update(argmax(forward(b.input), 1), b.target);
    log("val_acc", val_acc, {.prog_bar = true});
  }
  void test_step(const Batch& b, int64_t) override {
    test_acc.update(argmax(forward(b.input), 1), b.target);
    log("test_acc", test_acc);
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = lr}); }
};

}  // namespace

int main(int argc, char** argv) {
  examples::Args args;
  args.batch_size = 64;
  args.lr = 1e-3;
  args.out = "runs/mnist_cnn";
  int code = 0;
  if (!examples::parse_args(argc, argv, "Volt MNIST CNN (conv-bn-relu-pool x2, dropout, linear)", args, code))
    return code;
  try {
    seed_everything(args.seed);
    MnistCnn model(args.lr);
    data::MnistDataModule dm(args.data, args.batch_size, args.num_workers, args.seed, /*pin_memory=*/true,
                             /*shuffle_train=*/true);
    auto throughput = std::make_shared<examples::ThroughputMonitor>();
    Trainer trainer({.accelerator = args.accelerator, .devices = args.devices, .strategy = args.strategy,
                     .precision = args.precision, .max_epochs = args.epochs,
                     .enable_progress_bar = args.progress_bar, .default_root_dir = args.out,
                     .callbacks = {throughput}});
    trainer.fit(model, dm, args.resume);
    auto results = trainer.test(model, dm);
    if (trainer.strategy().is_global_zero()) {
      examples::write_results(args.out, "mnist_cnn", results.empty() ? MetricMap{} : results[0], *throughput,
                              model.device(), args);
      std::cout << "results written to " << args.out << "/results.json (train "
                << static_cast<int64_t>(throughput->samples_per_second()) << " samples/s)\n";
    }
  } catch (const Error& e) {
    std::cerr << "mnist_cnn: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
