#pragma once
/// @file
/// A dataset of NumPy arrays: inputs (N, ...) and targets (N, ...) from two .npy files or two keys of one .npz
/// archive (data/npy.h, data/npz.h), sample i being row i of each. It is a TensorDataset: the arrays are loaded
/// once into CPU memory and batches are gathered rows, so DataLoader, DataModule and Trainer take it as is.
///
/// @code
///   // np.savez("train.npz", x=images.astype(np.float32), y=labels)
///   auto train = NpyDataset::from_npz("train.npz", "x", "y", {.target_dtype = DType::i64});
///   DataLoader loader(train, {.batch_size = 64, .shuffle = true});
/// @endcode
#include <memory>
#include <optional>
#include <string>

#include <volt/data/dataset.h>

namespace volt::data {

struct NpyDatasetOptions {
  /// Convert after loading, e.g. f64 inputs (NumPy's default float) to f32, or u8/i32 labels to the i64 class
  /// indices cross_entropy takes. Unset keeps the dtype read (see data/npy.h for the dtype mapping).
  std::optional<DType> input_dtype;
  std::optional<DType> target_dtype;
};

class NpyDataset : public TensorDataset {
 public:
  /// Inputs from the .npy file `inputs_path`, targets from `targets_path` ("" for unlabelled data).
  static std::shared_ptr<NpyDataset> from_npy(const std::string& inputs_path, const std::string& targets_path,
                                              const NpyDatasetOptions& options = {});
  /// Inputs and targets from two keys of the .npz archive `path` ("" as targets_key for unlabelled data); other
  /// members are not decompressed.
  static std::shared_ptr<NpyDataset> from_npz(const std::string& path, const std::string& inputs_key = "x",
                                              const std::string& targets_key = "y",
                                              const NpyDatasetOptions& options = {});
  /// inputs (N, ...), targets (N, ...) or undefined. `inputs_name`/`targets_name` stand for the sources in
  /// errors: inputs must have at least one dimension and targets the same first dimension.
  NpyDataset(Tensor inputs, Tensor targets, const std::string& inputs_name = "inputs",
             const std::string& targets_name = "targets");
};

}  // namespace volt::data
