// A small convolutional net on MNIST-format data through the same Trainer:
// conv(1->16, 3x3) BN ReLU maxpool -> conv(16->32, 3x3) BN ReLU maxpool -> dropout -> linear(32*7*7 -> 10).
#include "examples/example_common.h"
#include "examples/mnist_models.h"

int main(int argc, char** argv) {
  using namespace volt::examples;
  Args defaults;
  defaults.batch_size = 64;
  defaults.lr = 1e-3;
  defaults.out = "runs/mnist_cnn";
  return run_example(argc, argv, "mnist_cnn", "Volt MNIST CNN (conv-bn-relu-pool x2, dropout, linear)", defaults,
                     /*shuffle_train=*/true, [](double lr) { return std::make_unique<MnistCnn>(lr); });
}
