#pragma once
/// @file
/// Next-token training windows over token shards (data/token_shard.h), laid out as the GPT-2 reference
/// (../shared/anchors/gpt2_torch.py, llm.c's loader) lays out a step: window j of a shard is its tokens
/// [j T, j T + T + 1); sample j is input = the first T of them, target = the last T (the next token at every
/// position). Windows step by T (consecutive windows share one token) and never cross from one shard into the
/// next; a shard's tail shorter than T + 1 tokens is unused. Windows are numbered shard by shard, so with a
/// sequential order, batch k of B holds windows kB .. kB + B - 1: exactly the reference's step k, which reads the
/// B T + 1 tokens from position k B T.
///
/// Data-parallel ranks: the Trainer's DDP strategies give every rank a DistributedSampler over the windows (rank
/// r takes windows r, r + R, ...), so the R ranks' step-k batches together hold windows kBR .. (k+1)BR - 1, the
/// windows of one process's step k at batch B R. RankBatchSampler gives each rank llm.c's layout instead
/// (contiguous runs of B windows) for loops driven by hand; both cover the same windows per step.
#include <cstdint>
#include <memory>
#include <vector>

#include <volt/data/dataset.h>
#include <volt/data/sampler.h>
#include <volt/data/token_shard.h>

namespace volt::data {

class TokenWindowDataset : public Dataset {
 public:
  /// Throws volt::Error when seq_len < 1, a shard is null, or no shard holds even one window (naming each
  /// shard and its token count).
  TokenWindowDataset(std::vector<std::shared_ptr<const TokenShard>> shards, int64_t seq_len);
  int64_t size() const override { return total_; }
  /// input, target: (T) i64.
  Batch get(int64_t index) const override;
  /// input, target: (B, T) i64, written straight from the shards into the batch (pinned: page-locked buffers).
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Batch get_batch_pinned(const std::vector<int64_t>& indices) const override;

  int64_t seq_len() const { return seq_len_; }
  const std::vector<std::shared_ptr<const TokenShard>>& shards() const { return shards_; }
  /// Windows of shard k.
  int64_t windows_in_shard(size_t k) const;
  /// Total tokens over all shards.
  int64_t num_tokens() const;

 private:
  Batch gather(const std::vector<int64_t>& indices, bool pinned) const;
  /// The first token of window `index`.
  const uint16_t* window(int64_t index) const;
  std::vector<std::shared_ptr<const TokenShard>> shards_;
  std::vector<int64_t> first_window_;  ///< per shard: the index of its first window; then the total
  int64_t seq_len_;
  int64_t total_ = 0;
};

/// llm.c's data-parallel layout: rank r's k-th batch is windows (kR + r)B .. (kR + r)B + B - 1, for the
/// floor(n / (B R)) steps that every rank can take (the rest of the windows are unused). With one rank: 0 .. n'-1
/// in order. The order does not change with the epoch.
class RankBatchSampler : public Sampler {
 public:
  RankBatchSampler(int64_t dataset_size, int64_t batch_size, int64_t num_replicas = 1, int64_t rank = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return steps_ * batch_size_; }

 private:
  int64_t batch_size_, num_replicas_, rank_, steps_;
};

}  // namespace volt::data
