#pragma once
/// @file
/// Map-style datasets: a size and random access to samples by index.
///
///  - Dataset: the interface. get(i) returns one sample (tensors without a batch dim); get_batch(indices)
///    returns the samples stacked along a new leading dim. The default get_batch calls get() per index and
///    stacks them with default_collate (data/collate.h), fields included; datasets with a faster path override it.
///  - TensorDataset: samples are rows of two preloaded tensors (inputs (N, ...), targets (N, ...)). Its
///    get_batch is a gather of contiguous rows straight into the batch buffer (one memcpy per sample), which is
///    what keeps a batch of 16 MNIST images at a couple of microseconds.
///  - Subset: a view of another dataset through an index map (what random_split returns).
///
/// Thread safety: get/get_batch are const and must be safe to call from several threads at once (the
/// DataLoader's workers do); every dataset here only reads its tensors.
#include <cstdint>
#include <memory>
#include <vector>

#include <volt/data/batch.h>

namespace volt::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// Sample `index`, 0 <= index < size(); out-of-range indices throw volt::Error.
  virtual Batch get(int64_t index) const = 0;
  /// Samples stacked along dim 0: input (B, ...), target (B, ...), fields (B, ...). Every sample must have the
  /// same shapes, dtypes, devices and field names. The result owns fresh memory (it never aliases the dataset).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
  /// Like get_batch, but host tensors are allocated in page-locked memory (pooled, see data/pinned_pool.h;
  /// plain memory when CUDA is unusable) so their upload to a GPU can be asynchronous. The default copies get_batch's
  /// result; TensorDataset and Subset gather directly into the pinned buffers.
  virtual Batch get_batch_pinned(const std::vector<int64_t>& indices) const;
};

/// Stacks tensors of equal shape, dtype and device along a new dim 0 (a plain memory copy; no autograd).
/// With `pinned`, CPU results are allocated by empty_pinned_batch. `op` names the caller in errors.
Tensor stack_samples(const std::vector<Tensor>& samples, bool pinned = false, const char* op = "stack_samples");

class TensorDataset : public Dataset {
 public:
  /// inputs (N, ...) and targets (N, ...) with the same N; targets may be undefined. Non-contiguous tensors
  /// are made contiguous once here.
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  /// Views into the dataset's tensors (no copy): input inputs[index], target targets[index].
  Batch get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Batch get_batch_pinned(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }    // (N, ...)
  const Tensor& targets() const { return targets_; }  // (N, ...) or undefined

 private:
  Batch gather(const std::vector<int64_t>& indices, bool pinned) const;
  Tensor inputs_;   ///< (N, ...) contiguous
  Tensor targets_;  ///< (N, ...) contiguous, or undefined
};

class Subset : public Dataset {
 public:
  /// Sample i of the subset is sample indices[i] of `base`; every index must be in range for `base`.
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Batch get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Batch get_batch_pinned(const std::vector<int64_t>& indices) const override;
  const std::shared_ptr<const Dataset>& base() const { return base_; }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::vector<int64_t> map(const std::vector<int64_t>& indices) const;
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

/// Splits `dataset` into disjoint random subsets that together cover it (torch.utils.data.random_split).
/// `lengths` are either sample counts summing to dataset->size() ({55000, 5000}) or fractions summing to 1
/// ({0.9, 0.1}; counts are floored and the remainder handed out one by one from the first subset). The
/// shuffle is randperm(size, seed): the same seed always gives the same split.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed);

}  // namespace volt::data
