#pragma once
// The example models: the MNIST MLP recipe and a small CNN, shared by examples/ and benchmarks/.
#include <memory>

#include <volt/nn/functional.h>
#include <volt/nn/metrics.h>
#include <volt/nn/nn.h>
#include <volt/nn/optim.h>
#include <volt/trainer/train_module.h>

namespace volt::examples {

struct MnistMlp : TrainModule {
  // l1's ReLU is fused into its GEMM (nn::LinearOptions): on the CPU the same bits as l1 then relu().
  nn::Linear l1{28 * 28, 128, {.activation = Activation::ReLU}}, l2{128, 10};
  metrics::Accuracy val_acc{{.num_classes = 10}}, test_acc{{.num_classes = 10}};
  double lr;

  explicit MnistMlp(double lr_) : lr(lr_) {
    register_module("l1", l1);
    register_module("l2", l2);
    save_hyperparameters({{"hidden_dim", 128}, {"learning_rate", lr}});
  }
  std::string type_name() const override { return "MnistMlp"; }

  Tensor forward(const Tensor& x) { return l2(l1(x.flatten(1))); }  // x (B, 1, 28, 28) -> (B, 10)

  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = cross_entropy(forward(b.input), b.target);
    log("train_loss", loss);
    return loss;
  }
  // The same device work for every batch, no host reads, a logged tensor: capturable (TrainerOptions::cuda_graphs).
  bool static_training_step() const override { return true; }
  // Predictions per step, metrics updated on the whole batch in *_step_end: right under dp/ddp2 too, where the
  // steps run concurrently on replicas (trainer/strategies/dp.h).
  StepOutput validation_step_outputs(const Batch& b, int64_t) override {
    return {{"pred", argmax(softmax(forward(b.input), 1), 1)}, {"y", b.target}};
  }
  void validation_step_end(const StepOutput& out) override {
    val_acc.update(out.at("pred"), out.at("y"));
    log("val_acc", val_acc, {.prog_bar = true});
  }
  StepOutput test_step_outputs(const Batch& b, int64_t) override {
    return {{"pred", argmax(softmax(forward(b.input), 1), 1)}, {"y", b.target}};
  }
  void test_step_end(const StepOutput& out) override {
    test_acc.update(out.at("pred"), out.at("y"));
    log("test_acc", test_acc);
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = lr}); }
  /// dp over several GPUs (or --dp-replicas): one of these per extra device.
  std::unique_ptr<TrainModule> make_replica() const override { return std::make_unique<MnistMlp>(lr); }
};


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
  // The same device work for every batch, no host reads, a logged tensor: capturable (TrainerOptions::cuda_graphs).
  bool static_training_step() const override { return true; }
  StepOutput validation_step_outputs(const Batch& b, int64_t) override {  // metrics in *_step_end, as MnistMlp
    return {{"pred", argmax(forward(b.input), 1)}, {"y", b.target}};
  }
  void validation_step_end(const StepOutput& out) override {
    val_acc.update(out.at("pred"), out.at("y"));
    log("val_acc", val_acc, {.prog_bar = true});
  }
  StepOutput test_step_outputs(const Batch& b, int64_t) override {
    return {{"pred", argmax(forward(b.input), 1)}, {"y", b.target}};
  }
  void test_step_end(const StepOutput& out) override {
    test_acc.update(out.at("pred"), out.at("y"));
    log("test_acc", test_acc);
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = lr}); }
  /// dp over several GPUs (or --dp-replicas): one of these per extra device.
  std::unique_ptr<TrainModule> make_replica() const override { return std::make_unique<MnistCnn>(lr); }
};

}  // namespace volt::examples
