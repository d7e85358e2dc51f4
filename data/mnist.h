#pragma once
/// @file
/// MNIST-format datasets (MNIST, Fashion-MNIST, KMNIST: same file names and layout).
///
/// A directory holds train-images-idx3-ubyte / train-labels-idx1-ubyte (60k samples for MNIST) and
/// t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte (10k), each optionally gzip-compressed (".gz"); the
/// "train-images.idx3-ubyte" spelling of some mirrors is accepted too. Debian's dataset-fashion-mnist installs
/// the gzip files under /usr/share/datasets/fashion-mnist.
#include <memory>
#include <string>
#include <vector>

#include <volt/data/dataset.h>

namespace volt::data {

struct MnistFiles {
  std::string images;
  std::string labels;
};

/// The image and label files for the training (train-*) or test (t10k-*) split in `dir`. Throws volt::Error
/// listing every name it looked for when a file is missing.
MnistFiles find_mnist_files(const std::string& dir, bool train);

/// Raw MNIST: inputs u8 (N, rows, cols) (28x28 for MNIST), targets i64 (N) class labels.
class MnistDataset : public TensorDataset {
 public:
  /// Reads the split's files from `dir` (see find_mnist_files) and checks the image and label counts agree.
  static std::shared_ptr<MnistDataset> load(const std::string& dir, bool train = true);
  MnistDataset(Tensor images, Tensor labels) : TensorDataset(std::move(images), std::move(labels)) {}

  /// The preloaded float form models train on: inputs f32 (N, 1, rows, cols) = (x/255 - mean) / std, targets
  /// i64 (N) shared with this dataset. The defaults are the MNIST statistics used by the reference template.
  std::shared_ptr<TensorDataset> normalized(double mean = 0.1307, double std = 0.3081) const;
};

}  // namespace volt::data
