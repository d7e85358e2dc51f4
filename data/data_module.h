#pragma once
/// @file
/// DataModule: everything needed to feed a model, in one object (the LightningDataModule contract).
///
/// The trainer calls prepare_data() once (on one process per node: download or check files; must not set state
/// used by other ranks), then setup(stage) on every process with stage "fit", "validate", "test" or "predict"
/// ("" = all), then asks for the loaders it needs. A loader function returning nullptr means "no such data"
/// (for example no validation set): the trainer skips that loop.
#include <memory>
#include <string>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>

namespace volt::data {

class DataModule {
 public:
  virtual ~DataModule() = default;
  virtual void prepare_data() {}
  virtual void setup(const std::string& stage) {}
  virtual std::shared_ptr<DataLoader> train_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> val_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> test_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> predict_dataloader() { return nullptr; }
};

/// MNIST-format data (MNIST, Fashion-MNIST) as in the reference template: images become f32 (1, 28, 28) with
/// ToTensor scaling and Normalize(0.1307, 0.3081), preloaded once; the 60,000 training samples are split at
/// random (seeded) into 55,000 for training and 5,000 for validation (other sizes keep the 11:1 ratio:
/// val = round(n / 12)); the t10k files are the test (and predict) set. The training loader shuffles with
/// `seed` (set shuffle_train = false for the template's fixed order); evaluation loaders keep the order.
///
/// Distributed runs: when a default process group is initialised and the node runs several of its ranks
/// (data::node_sharing_available()), setup() loads the normalized tensors ONCE per node into shared memory
/// (data/shared_dataset.h) instead of once per process: local rank 0 reads and normalizes, the other local
/// ranks map the same pages read-only. setup() is then collective (every rank must call it with the same
/// stages, which the trainer does). The values, splits and loaders are the same as in a single process.
class MnistDataModule : public DataModule {
 public:
  MnistDataModule(std::string dir, int64_t batch_size = 16, int num_workers = 0, uint64_t seed = 42,
                  bool pin_memory = false, bool shuffle_train = true);

  /// Checks that the four files are present (nothing is downloaded); throws listing the names looked for.
  void prepare_data() override;
  void setup(const std::string& stage) override;
  std::shared_ptr<DataLoader> train_dataloader() override;
  std::shared_ptr<DataLoader> val_dataloader() override;
  std::shared_ptr<DataLoader> test_dataloader() override;
  std::shared_ptr<DataLoader> predict_dataloader() override;

  /// Available after setup("fit") / setup("test") (null before).
  const std::shared_ptr<Dataset>& train_dataset() const { return train_; }
  const std::shared_ptr<Dataset>& val_dataset() const { return val_; }
  const std::shared_ptr<Dataset>& test_dataset() const { return test_; }

  /// Whether the last setup() loaded its data into node-shared memory (see above); false in one process.
  bool shared() const { return shared_; }
  /// Turns node sharing off (each rank then loads its own copy, as in a single process). Default on.
  void set_share_across_local_ranks(bool on) { share_ = on; }

  static constexpr double kMean = 0.1307;
  static constexpr double kStd = 0.3081;

 private:
  std::shared_ptr<DataLoader> make_loader(const std::shared_ptr<Dataset>& ds, bool shuffle, const char* which);

  std::string dir_;
  int64_t batch_size_;
  int num_workers_;
  uint64_t seed_;
  bool pin_memory_;
  bool shuffle_train_;
  bool share_ = true;
  bool shared_ = false;
  std::shared_ptr<Dataset> train_, val_, test_;
};

}  // namespace volt::data
