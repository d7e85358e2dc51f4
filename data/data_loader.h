#pragma once
/// @file
/// DataLoader: turns a Dataset into a sequence of batches, one epoch ("pass") at a time.
///
/// @code
///   DataLoader loader(dataset, {.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 42});
///   for (int64_t epoch = 0; epoch < 3; ++epoch) {
///     loader.set_epoch(epoch);
///     for (const Batch& b : loader) { ... b.input, b.target ... }
///   }
/// @endcode
///
/// Order. The sampler (options.sampler, else RandomSampler(seed) when shuffle, else SequentialSampler) gives
/// the epoch's indices; batch k holds indices [k*batch_size, (k+1)*batch_size), the last one shorter unless
/// drop_last drops it. Batches always arrive in this order, with or without workers.
///
/// Epochs. Every pass (begin(), or next() when no pass is running) uses the epoch set by set_epoch() or
/// load_state(), else the previous pass's epoch + 1 (the first pass is epoch 0). A shuffling sampler's order
/// is a pure function of (seed, epoch), so runs are reproducible.
///
/// Resume. state() is the position {epoch, batches consumed}; load_state() makes the next pass start there,
/// so "run k batches, save state, load it into a fresh loader, iterate" yields exactly the batches that
/// straight iteration would have.
///
/// Workers. With num_workers > 0, background threads assemble batches ahead of the consumer: at most
/// num_workers * prefetch_factor batches are assembled or in progress beyond the one being consumed. A worker's
/// exception is rethrown by next() (same type and message) and ends the pass. Workers stop when the pass ends
/// (or live until the loader is destroyed with persistent_workers); destroying the loader mid-pass waits only
/// for the batches being assembled at that moment.
///
/// Pinned memory. With pin_memory and a usable GPU, batches are assembled directly into page-locked buffers
/// so Batch::to(cuda, /*non_blocking=*/true) can overlap the copy with compute; without a GPU they are plain
/// memory. pins_memory() reports which. The page-locked buffers come from a pool (data/pinned_pool.h), since
/// freeing page-locked memory synchronises the GPU.
///
/// Per-sample stage. With a sample_transform or a collate, a batch is made sample by sample, in the worker
/// that assembles it: dataset.get(i) for each index, then sample_transform(sample, generator) when given, then
/// collate(samples) (default_collate when not given; pinned_copy of a user collate's result with pin_memory).
/// Without either, the dataset's get_batch / get_batch_pinned (a faster gather for in-memory data) is used.
/// Each sample's generator is seeded sample_seed(options.seed, epoch, i) with i the sample's dataset index, so a
/// sample's random augmentation depends on neither num_workers nor the order or batch it lands in, and changes
/// from epoch to epoch. An exception from get, the transform or the collate is rethrown by next() as a
/// volt::Error that names the stage, the batch, the epoch and (for get and the transform) the sample index, and
/// carries the original exception nested (std::rethrow_if_nested recovers it).
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>

#include <volt/data/batch.h>
#include <volt/data/collate.h>
#include <volt/data/dataset.h>
#include <volt/data/sampler.h>
#include <volt/runtime/generator.h>

namespace volt::data {

/// A random per-sample augmentation: sample in, augmented sample out, drawing its random numbers from `gen`
/// (a fresh generator per sample and epoch, see sample_seed). Called from loader worker threads, several at
/// once: it must be thread-safe and must not keep `gen`. Ready-made ones are in data/transforms.h.
using SampleTransform = std::function<Batch(Batch sample, Generator& gen)>;

/// The seed of the generator handed to sample_transform for dataset index `index` in pass `epoch`: a
/// SplitMix64 hash of (seed, epoch, index).
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;             ///< ignored when `sampler` is given
  bool drop_last = false;           ///< drop a final batch smaller than batch_size
  std::shared_ptr<Sampler> sampler; ///< optional; its size() may differ from the dataset's (e.g. a shard)
  int num_workers = 0;              ///< 0: batches are assembled in next() on the calling thread
  int prefetch_factor = 2;          ///< batches in flight per worker
  bool persistent_workers = false;  ///< keep worker threads across passes
  bool pin_memory = false;
  uint64_t seed = 0;                ///< for the RandomSampler created by `shuffle` and the sample generators
  CollateFn collate;                ///< optional: replaces default_collate (see "Per-sample stage")
  SampleTransform sample_transform; ///< optional: applied to every sample, every epoch, in the workers
};

/// Position in the stream of batches: the pass `epoch`, of which `batches_consumed` batches were handed out.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batches_consumed = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per pass.
  int64_t size() const;
  /// The next batch of the running pass, starting a pass if none is running; std::nullopt once the pass is
  /// exhausted (that call ends it; the following call starts the next epoch).
  std::optional<Batch> next();

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;
    Iterator() = default;  ///< the end
    const Batch& operator*() const { return *current_; }
    const Batch* operator->() const { return &*current_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return loader_ == o.loader_; }

   private:
    friend class DataLoader;
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  /// Starts a new pass (abandoning any running one) and returns its first batch.
  Iterator begin();
  Iterator end() { return Iterator(); }

  /// Sets the epoch of the next pass and ends any running pass.
  void set_epoch(int64_t epoch);
  /// The running pass's epoch, else the next pass's.
  int64_t epoch() const;
  LoaderState state() const;
  /// The next pass is state.epoch, starting after state.batches_consumed batches; ends any running pass.
  void load_state(const LoaderState& state);
  /// Replaces the sampler (the trainer installs DistributedSamplers this way); ends any running pass.
  void set_sampler(std::shared_ptr<Sampler> sampler);
  /// Abandons the running pass, if any (its epoch still counts as used).
  void reset();

  bool pins_memory() const { return pinned_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  struct Assembler;
  struct Workers;
  void start_pass();
  void end_pass();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  bool pinned_ = false;
  std::shared_ptr<const Assembler> assemble_;

  bool active_ = false;
  int64_t epoch_ = 0;              ///< of the running pass
  int64_t next_epoch_ = 0;         ///< of the next pass
  int64_t next_start_ = 0;         ///< first batch of the next pass
  int64_t consumed_ = 0;           ///< batches handed out in the running pass (including skipped ones)
  int64_t num_batches_ = 0;        ///< in the running pass
  std::shared_ptr<const std::vector<int64_t>> order_;  ///< the running pass's sample indices
  std::unique_ptr<Workers> workers_;
};

}  // namespace volt::data
