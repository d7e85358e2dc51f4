#include <volt/data/data_module.h>

#include <cmath>

#include <volt/data/mnist.h>
#include <volt/data/shared_dataset.h>

namespace volt::data {

MnistDataModule::MnistDataModule(std::string dir, int64_t batch_size, int num_workers, uint64_t seed,
                                 bool pin_memory, bool shuffle_train)
    : dir_(std::move(dir)), batch_size_(batch_size), num_workers_(num_workers), seed_(seed),
      pin_memory_(pin_memory), shuffle_train_(shuffle_train) {
  VOLT_CHECK(batch_size >= 1, "MnistDataModule: batch_size must be >= 1, got ", batch_size);
  VOLT_CHECK(num_workers >= 0, "MnistDataModule: num_workers must be >= 0, got ", num_workers);
}

void MnistDataModule::prepare_data() {
  find_mnist_files(dir_, true);
  find_mnist_files(dir_, false);
}

void MnistDataModule::setup(const std::string& stage) {
  VOLT_CHECK(stage.empty() || stage == "fit" || stage == "validate" || stage == "test" || stage == "predict",
             "MnistDataModule::setup: unknown stage '", stage, "' (expected fit, validate, test, predict or empty)");
  const bool share = share_ && node_sharing_available();
  // Collective when shared: every rank makes the same calls, since they all see the same stage and state.
  auto load = [&](bool train) -> std::shared_ptr<TensorDataset> {
    if (share) return load_mnist_normalized_shared(dir_, train, kMean, kStd, dist::default_group());
    return MnistDataset::load(dir_, train)->normalized(kMean, kStd);
  };
  const bool want_train = (stage.empty() || stage == "fit" || stage == "validate") && !train_;
  const bool want_test = (stage.empty() || stage == "test" || stage == "predict") && !test_;
  if (want_train || want_test) shared_ = share;
  if (want_train) {
    auto full = load(true);
    const int64_t n = full->size();
    const int64_t n_val = static_cast<int64_t>(std::llround(static_cast<double>(n) / 12.0));
    auto parts = random_split(full, {static_cast<double>(n - n_val), static_cast<double>(n_val)}, seed_);
    train_ = parts[0];
    val_ = parts[1];
  }
  if (want_test) test_ = load(false);
}

std::shared_ptr<DataLoader> MnistDataModule::make_loader(const std::shared_ptr<Dataset>& ds, bool shuffle,
                                                         const char* which) {
  VOLT_CHECK(ds != nullptr, "MnistDataModule::", which, "_dataloader: call setup() first (no ", which,
             " dataset loaded)");
  DataLoaderOptions o;
  o.batch_size = batch_size_;
  o.shuffle = shuffle;
  o.num_workers = num_workers_;
  o.persistent_workers = num_workers_ > 0;
  o.pin_memory = pin_memory_;
  o.seed = seed_;
  return std::make_shared<DataLoader>(ds, o);
}

std::shared_ptr<DataLoader> MnistDataModule::train_dataloader() { return make_loader(train_, shuffle_train_, "train"); }
std::shared_ptr<DataLoader> MnistDataModule::val_dataloader() { return make_loader(val_, false, "val"); }
std::shared_ptr<DataLoader> MnistDataModule::test_dataloader() { return make_loader(test_, false, "test"); }
std::shared_ptr<DataLoader> MnistDataModule::predict_dataloader() { return make_loader(test_, false, "predict"); }

}  // namespace volt::data
