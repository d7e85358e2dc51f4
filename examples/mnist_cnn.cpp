// A small convolutional net on MNIST-format data through the same Trainer:
// conv(1->16, 3x3) BN ReLU maxpool -> conv(16->32, 3x3) BN ReLU maxpool -> dropout -> linear(32*7*7 -> 10).
#include <iostream>

#include "data/data_module.h"
#include "examples/example_common.h"
#include "examples/mnist_models.h"
#include "trainer/trainer.h"

using namespace volt;


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
    examples::MnistCnn model(args.lr);
    data::MnistDataModule dm(args.data, args.batch_size, args.num_workers, args.seed, /*pin_memory=*/true,
                             /*shuffle_train=*/true);
    auto throughput = std::make_shared<ThroughputMonitor>();
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
