#include <volt/data/npy_dataset.h>

#include <volt/data/npy.h>
#include <volt/data/npz.h>
#include <volt/runtime/error.h>

namespace volt::data {

namespace {

const Tensor& checked(const Tensor& inputs, const Tensor& targets, const std::string& inputs_name,
                      const std::string& targets_name) {
  VOLT_CHECK(inputs.defined() && inputs.dim() >= 1, "NpyDataset: ", inputs_name, " must be an array of shape (N, ...) ",
             "with one sample per row, got ", inputs.defined() ? "a 0-d array" : "an undefined tensor");
  if (targets.defined())
    VOLT_CHECK(targets.dim() >= 1 && targets.size(0) == inputs.size(0), "NpyDataset: ", inputs_name, " holds ",
               inputs.size(0), " samples (shape ", inputs.shape_str(), ") but ", targets_name, " has shape ",
               targets.shape_str(), "; the first dimensions must agree");
  return inputs;
}

Tensor convert(Tensor t, const std::optional<DType>& dtype) {
  return t.defined() && dtype && t.dtype() != *dtype ? t.to(*dtype) : t;
}

}  // namespace

NpyDataset::NpyDataset(Tensor inputs, Tensor targets, const std::string& inputs_name,
                       const std::string& targets_name)
    : TensorDataset(checked(inputs, targets, inputs_name, targets_name), targets) {}

std::shared_ptr<NpyDataset> NpyDataset::from_npy(const std::string& inputs_path, const std::string& targets_path,
                                                 const NpyDatasetOptions& options) {
  Tensor x = convert(read_npy(inputs_path), options.input_dtype);
  Tensor y = targets_path.empty() ? Tensor() : convert(read_npy(targets_path), options.target_dtype);
  return std::make_shared<NpyDataset>(std::move(x), std::move(y), "'" + inputs_path + "'", "'" + targets_path + "'");
}

std::shared_ptr<NpyDataset> NpyDataset::from_npz(const std::string& path, const std::string& inputs_key,
                                                 const std::string& targets_key, const NpyDatasetOptions& options) {
  Tensor x = convert(read_npz_array(path, inputs_key), options.input_dtype);
  Tensor y = targets_key.empty() ? Tensor() : convert(read_npz_array(path, targets_key), options.target_dtype);
  return std::make_shared<NpyDataset>(std::move(x), std::move(y), "'" + path + "' key '" + inputs_key + "'",
                                      "'" + path + "' key '" + targets_key + "'");
}

}  // namespace volt::data
