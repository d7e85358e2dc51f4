#pragma once
/// @file
/// Samplers decide which dataset indices an epoch visits and in what order.
///
/// Every sampler is deterministic: indices() depends only on its construction arguments and the epoch set by
/// set_epoch(), so a resumed run, or every rank of a distributed job, sees the same order.
#include <cstdint>
#include <vector>

namespace volt::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of the current epoch, in visiting order; exactly size() of them.
  virtual std::vector<int64_t> indices() const = 0;
  virtual int64_t size() const = 0;
  /// Selects the epoch; shuffling samplers derive a new permutation from (seed, epoch).
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

/// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A permutation of 0..n-1 that is a pure function of (seed, epoch): randperm(n, seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// One rank's shard of a dataset of `dataset_size` samples for data-parallel training (PyTorch's
/// DistributedSampler layout). The global order (randperm(n, seed, epoch) when shuffling, else 0..n-1) is
/// identical on every rank; rank r takes positions r, r + R, r + 2R, ... of it.
///  - drop_last: the order is cut to floor(n/R)*R so every shard has floor(n/R) samples.
///  - pad (training): the order is extended to ceil(n/R)*R by repeating it from the start, so every shard has
///    ceil(n/R) samples and all ranks run the same number of steps.
///  - neither (evaluation): no sample is repeated or dropped; every sample is visited exactly once across
///    ranks, and the first n % R ranks get one sample more than the rest.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false, bool pad = false);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return shard_size_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_, pad_;
  int64_t total_;       ///< length of the global order after dropping or padding
  int64_t shard_size_;  ///< this rank's share of it
};

}  // namespace volt::data
