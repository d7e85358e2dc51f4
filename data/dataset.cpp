#include <volt/data/dataset.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include <volt/data/collate.h>
#include <volt/data/permutation.h>
#include <volt/data/pinned_pool.h>
#include <volt/runtime/cuda_api.h>

namespace volt::data {

namespace {

Tensor alloc(const Shape& shape, DType dtype, Device device, bool pinned) {
  return pinned && !device.is_cuda() ? empty_pinned_batch(shape, dtype) : empty(shape, dtype, device);
}

void copy(void* dst, const void* src, size_t nbytes, Device device) {
  if (device.is_cuda()) copy_bytes(dst, device, src, device, nbytes);
  else std::memcpy(dst, src, nbytes);
}

// Row `index` of a contiguous (N, ...) tensor as a view.
Tensor row_view(const Tensor& t, int64_t index) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  return make_view(t, shape, contiguous_strides(shape), t.offset() + index * shape_numel(shape));
}

// Rows `indices` of a contiguous (N, ...) tensor copied into a new (B, ...) tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& indices, bool pinned) {
  Shape shape = src.shape();
  const int64_t n = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = alloc(shape, src.dtype(), src.device(), pinned);
  const size_t row = src.numel() == 0 ? 0 : src.nbytes() / static_cast<size_t>(n);
  const char* base = static_cast<const char*>(src.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    VOLT_CHECK(i >= 0 && i < n, "TensorDataset::get_batch: index ", i, " (position ", k,
               " of the batch) is out of range for a dataset of ", n, " samples");
    copy(dst + k * row, base + static_cast<size_t>(i) * row, row, src.device());
  }
  return out;
}

}  // namespace

Tensor stack_samples(const std::vector<Tensor>& samples, bool pinned, const char* op) {
  VOLT_CHECK(!samples.empty(), op, ": cannot stack an empty list of samples");
  const Tensor& first = samples[0];
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
  Tensor out = alloc(shape, first.dtype(), first.device(), pinned);
  const size_t bytes = first.nbytes();
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < samples.size(); ++k) {
    const Tensor& s = samples[k];
    VOLT_CHECK(s.shape() == first.shape() && s.dtype() == first.dtype() && s.device() == first.device(), op,
               ": sample ", k, " has shape ", s.shape_str(), ", dtype ", dtype_name(s.dtype()), " on ",
               s.device().str(), " but sample 0 has shape ", first.shape_str(), ", dtype ",
               dtype_name(first.dtype()), " on ", first.device().str(), "; every sample must match");
    Tensor c = s.contiguous();
    copy(dst + k * bytes, c.data_ptr(), bytes, s.device());
  }
  return out;
}

// ---- Dataset -----------------------------------------------------------------------------------------------

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  VOLT_CHECK(!indices.empty(), "Dataset::get_batch: empty index list");
  std::vector<Batch> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(get(i));
  return default_collate(samples);
}

Batch Dataset::get_batch_pinned(const std::vector<int64_t>& indices) const {
  return pinned_copy(get_batch(indices));
}

// ---- TensorDataset -----------------------------------------------------------------------------------------

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) {
  VOLT_CHECK(inputs.defined() && inputs.dim() >= 1, "TensorDataset: inputs must be a tensor of shape (N, ...), got ",
             inputs.defined() ? inputs.shape_str() : std::string("an undefined tensor"));
  if (targets.defined()) {
    VOLT_CHECK(targets.dim() >= 1 && targets.size(0) == inputs.size(0), "TensorDataset: targets ",
               targets.shape_str(), " must have the same first dimension as inputs ", inputs.shape_str());
    VOLT_CHECK(targets.device() == inputs.device(), "TensorDataset: targets on ", targets.device().str(),
               " but inputs on ", inputs.device().str(), "; both must be on one device");
  }
  inputs_ = inputs.detach().contiguous();
  if (targets.defined()) targets_ = targets.detach().contiguous();
}

Batch TensorDataset::get(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index,
             " is out of range for a dataset of ", size(), " samples");
  Batch b;
  b.input = row_view(inputs_, index);
  if (targets_.defined()) b.target = row_view(targets_, index);
  return b;
}

Batch TensorDataset::gather(const std::vector<int64_t>& indices, bool pinned) const {
  Batch b;
  b.input = gather_rows(inputs_, indices, pinned);
  if (targets_.defined()) b.target = gather_rows(targets_, indices, pinned);
  return b;
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const { return gather(indices, false); }
Batch TensorDataset::get_batch_pinned(const std::vector<int64_t>& indices) const { return gather(indices, true); }

// ---- Subset ------------------------------------------------------------------------------------------------

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  VOLT_CHECK(base_ != nullptr, "Subset: base dataset is null");
  const int64_t n = base_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    VOLT_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: index ", indices_[k], " (entry ", k,
               ") is out of range for a base dataset of ", n, " samples");
}

std::vector<int64_t> Subset::map(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> out(indices.size());
  const int64_t n = size();
  for (size_t k = 0; k < indices.size(); ++k) {
    VOLT_CHECK(indices[k] >= 0 && indices[k] < n, "Subset::get_batch: index ", indices[k],
               " is out of range for a subset of ", n, " samples");
    out[k] = indices_[static_cast<size_t>(indices[k])];
  }
  return out;
}

Batch Subset::get(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < size(), "Subset::get: index ", index, " is out of range for a subset of ",
             size(), " samples");
  return base_->get(indices_[static_cast<size_t>(index)]);
}

Batch Subset::get_batch(const std::vector<int64_t>& indices) const { return base_->get_batch(map(indices)); }
Batch Subset::get_batch_pinned(const std::vector<int64_t>& indices) const {
  return base_->get_batch_pinned(map(indices));
}

// ---- random_split ------------------------------------------------------------------------------------------

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed) {
  VOLT_CHECK(dataset != nullptr, "random_split: dataset is null");
  VOLT_CHECK(!lengths.empty(), "random_split: lengths must not be empty");
  const int64_t n = dataset->size();
  std::ostringstream given;
  double sum = 0;
  bool integral = true, fractional = true;
  for (size_t k = 0; k < lengths.size(); ++k) {
    given << (k ? ", " : "{") << lengths[k];
    VOLT_CHECK(lengths[k] >= 0 && std::isfinite(lengths[k]), "random_split: length ", k, " is ", lengths[k],
               "; lengths must be non-negative");
    sum += lengths[k];
    integral = integral && lengths[k] == std::floor(lengths[k]);
    fractional = fractional && lengths[k] <= 1.0;
  }
  given << "}";
  std::vector<int64_t> counts(lengths.size());
  if (integral && static_cast<int64_t>(sum) == n) {
    for (size_t k = 0; k < lengths.size(); ++k) counts[k] = static_cast<int64_t>(lengths[k]);
  } else if (fractional && std::abs(sum - 1.0) < 1e-6) {
    int64_t assigned = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      counts[k] = static_cast<int64_t>(std::floor(static_cast<double>(n) * lengths[k]));
      assigned += counts[k];
    }
    for (int64_t r = 0; r < n - assigned; ++r) counts[static_cast<size_t>(r) % counts.size()] += 1;
  } else {
    VOLT_FAIL("random_split: lengths ", given.str(), " sum to ", sum, " but the dataset has ", n,
              " samples; pass counts summing to ", n, " or fractions summing to 1");
  }
  const std::vector<int64_t> perm = randperm(n, seed);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t start = 0;
  for (int64_t c : counts) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(perm.begin() + start, perm.begin() + start + c)));
    start += c;
  }
  return out;
}

}  // namespace volt::data
