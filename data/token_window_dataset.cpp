#include <volt/data/token_window_dataset.h>

#include <algorithm>
#include <sstream>

#include <volt/data/pinned_pool.h>
#include <volt/runtime/error.h>

namespace volt::data {

TokenWindowDataset::TokenWindowDataset(std::vector<std::shared_ptr<const TokenShard>> shards, int64_t seq_len)
    : shards_(std::move(shards)), seq_len_(seq_len) {
  VOLT_CHECK(seq_len >= 1, "TokenWindowDataset: seq_len must be positive, got ", seq_len);
  VOLT_CHECK(!shards_.empty(), "TokenWindowDataset: no shards given");
  std::ostringstream list;
  for (size_t k = 0; k < shards_.size(); ++k) {
    VOLT_CHECK(shards_[k] != nullptr, "TokenWindowDataset: shard ", k, " is null");
    first_window_.push_back(total_);
    total_ += windows_in_shard(k);
    list << (k ? ", " : "") << "'" << shards_[k]->name() << "' (" << shards_[k]->size() << " tokens)";
  }
  first_window_.push_back(total_);
  VOLT_CHECK(total_ > 0, "TokenWindowDataset: no window of seq_len + 1 = ", seq_len + 1, " tokens fits in ",
             list.str(), "; give more tokens or a shorter sequence length");
}

int64_t TokenWindowDataset::windows_in_shard(size_t k) const {
  const int64_t n = shards_.at(k)->size();
  return n > seq_len_ ? (n - 1) / seq_len_ : 0;
}

int64_t TokenWindowDataset::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s->size();
  return n;
}

const uint16_t* TokenWindowDataset::window(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < total_, "TokenWindowDataset: index ", index, " is out of range for ", total_,
             " windows");
  const auto k = static_cast<size_t>(std::upper_bound(first_window_.begin(), first_window_.end(), index) -
                                     first_window_.begin() - 1);
  return shards_[k]->data() + (index - first_window_[k]) * seq_len_;
}

Batch TokenWindowDataset::get(int64_t index) const {
  Batch b = gather({index}, false);
  b.input = b.input.reshape({seq_len_});
  b.target = b.target.reshape({seq_len_});
  return b;
}

Batch TokenWindowDataset::gather(const std::vector<int64_t>& indices, bool pinned) const {
  const Shape shape{static_cast<int64_t>(indices.size()), seq_len_};
  Batch b;
  b.input = pinned ? empty_pinned_batch(shape, DType::i64) : empty(shape, DType::i64);
  b.target = pinned ? empty_pinned_batch(shape, DType::i64) : empty(shape, DType::i64);
  int64_t* in = b.input.data<int64_t>();
  int64_t* tg = b.target.data<int64_t>();
  for (size_t r = 0; r < indices.size(); ++r) {
    const uint16_t* w = window(indices[r]);
    std::copy(w, w + seq_len_, in + static_cast<int64_t>(r) * seq_len_);
    std::copy(w + 1, w + seq_len_ + 1, tg + static_cast<int64_t>(r) * seq_len_);
  }
  return b;
}

Batch TokenWindowDataset::get_batch(const std::vector<int64_t>& indices) const { return gather(indices, false); }
Batch TokenWindowDataset::get_batch_pinned(const std::vector<int64_t>& indices) const {
  return gather(indices, true);
}

RankBatchSampler::RankBatchSampler(int64_t n, int64_t batch_size, int64_t num_replicas, int64_t rank)
    : batch_size_(batch_size), num_replicas_(num_replicas), rank_(rank) {
  VOLT_CHECK(batch_size >= 1, "RankBatchSampler: batch_size must be positive, got ", batch_size);
  VOLT_CHECK(num_replicas >= 1, "RankBatchSampler: num_replicas must be positive, got ", num_replicas);
  VOLT_CHECK(rank >= 0 && rank < num_replicas, "RankBatchSampler: rank ", rank, " is out of range [0, ",
             num_replicas, ")");
  VOLT_CHECK(n >= 0, "RankBatchSampler: dataset_size must be non-negative, got ", n);
  steps_ = n / (batch_size * num_replicas);
}

std::vector<int64_t> RankBatchSampler::indices() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(size()));
  for (int64_t k = 0; k < steps_; ++k)
    for (int64_t j = 0; j < batch_size_; ++j) out.push_back((k * num_replicas_ + rank_) * batch_size_ + j);
  return out;
}

}  // namespace volt::data
