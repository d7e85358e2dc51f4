// The MNIST MLP recipe: 784-128-10, ReLU, Adam lr 1e-4, batch 16, a random 55,000/5,000 train/val split of the
// 60,000 training images, validation accuracy on the progress bar, test at the end.
//
//   build/examples/mnist_mlp --epochs 1            # Fashion-MNIST installed by the setup script
//   build/examples/mnist_mlp --data ~/mnist --accelerator gpu --devices 1
#include "examples/example_common.h"
#include "examples/mnist_models.h"

int main(int argc, char** argv) {
  using namespace volt::examples;
  Args defaults;
  defaults.out = "runs/mnist_mlp";
  // The recipe's loaders do not shuffle: the random split already permutes the training images.
  return run_example(argc, argv, "mnist_mlp", "Volt MNIST MLP (784-128-10, Adam)", defaults, /*shuffle_train=*/false,
                     [](double lr) { return std::make_unique<MnistMlp>(lr); });
}
