#include <volt/data/sampler.h>

#include <numeric>

#include <volt/data/permutation.h>
#include <volt/runtime/error.h>

namespace volt::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  VOLT_CHECK(n >= 0, "SequentialSampler: n must be non-negative, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  VOLT_CHECK(n >= 0, "RandomSampler: n must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  return randperm(n_, seed_, static_cast<uint64_t>(epoch_));
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last, bool pad)
    : n_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last), pad_(pad) {
  VOLT_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be non-negative, got ", dataset_size);
  VOLT_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  VOLT_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is out of range for ",
             num_replicas, " replicas (expected 0 <= rank < num_replicas)");
  VOLT_CHECK(!(drop_last && pad), "DistributedSampler: drop_last and pad are exclusive (drop the tail or "
             "repeat samples, not both)");
  if (drop_last) total_ = n_ / num_replicas_ * num_replicas_;
  else if (pad) total_ = (n_ + num_replicas_ - 1) / num_replicas_ * num_replicas_;
  else total_ = n_;
  VOLT_CHECK(!pad || n_ > 0 || total_ == 0, "DistributedSampler: cannot pad an empty dataset");
  // Positions rank, rank + R, ... below total_.
  shard_size_ = total_ > rank_ ? (total_ - rank_ + num_replicas_ - 1) / num_replicas_ : 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = randperm(n_, seed_, static_cast<uint64_t>(epoch_));
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(shard_size_));
  // Position p >= n wraps to the start of the order (padding repeats from the beginning).
  for (int64_t p = rank_; p < total_; p += num_replicas_) out.push_back(order[static_cast<size_t>(p % n_)]);
  return out;
}

}  // namespace volt::data
