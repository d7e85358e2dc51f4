// The MNIST MLP recipe: 784-128-10, ReLU, Adam lr 1e-4, batch 16, a random 55,000/5,000 train/val split of the
// 60,000 training images, validation accuracy on the progress bar, test at the end.
//
//   build/examples/mnist_mlp --epochs 1            # Fashion-MNIST installed by the setup script
//   build/examples/mnist_mlp --data ~/mnist --accelerator gpu --devices 1
#include <iostream>

#include "data/data_module.h"
#include "examples/example_common.h"
#include "examples/mnist_models.h"
#include "trainer/trainer.h"

using namespace volt;


int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Volt MNIST MLP (784-128-10, Adam)", args, code)) return code;
  try {
    seed_everything(args.seed);
    examples::MnistMlp model(args.lr);
    // The recipe's loaders: no shuffling (the random split already permutes the training images).
    data::MnistDataModule dm(args.data, args.batch_size, args.num_workers, args.seed, /*pin_memory=*/true,
                             /*shuffle_train=*/false);
    auto throughput = std::make_shared<ThroughputMonitor>();
    Trainer trainer({.accelerator = args.accelerator, .devices = args.devices, .strategy = args.strategy,
                     .precision = args.precision, .max_epochs = args.epochs,
                     .enable_progress_bar = args.progress_bar, .default_root_dir = args.out,
                     .callbacks = {throughput}});
    trainer.fit(model, dm, args.resume);
    auto results = trainer.test(model, dm);
    if (trainer.strategy().is_global_zero()) {
      examples::write_results(args.out, "mnist_mlp", results.empty() ? MetricMap{} : results[0], *throughput,
                              model.device(), args);
      std::cout << "results written to " << args.out << "/results.json (train "
                << static_cast<int64_t>(throughput->samples_per_second()) << " samples/s)\n";
    }
  } catch (const Error& e) {
    std::cerr << "mnist_mlp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
