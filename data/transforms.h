#pragma once
// Whole-dataset transforms. Volt applies deterministic transforms once, when the data is loaded, and keeps
// the result in RAM as a float TensorDataset (the "preload to RAM" advice), instead of re-running them on
// every sample of every epoch. All functions take and return CPU tensors and never record autograd history.
#include <functional>
#include <memory>
#include <vector>

#include "data/dataset.h"

namespace volt::data {

using Transform = std::function<Tensor(const Tensor&)>;

// u8 (...) -> f32 (...) with values x / 255 (torchvision's ToTensor scaling).
Tensor to_float(const Tensor& images);
// f32 (...) -> f32 (...): (x - mean) / std, computed in f32 like torchvision's Normalize. std must be > 0.
Tensor normalize(const Tensor& x, double mean, double std);
// Applies `transforms` left to right.
Transform compose(std::vector<Transform> transforms);
// A TensorDataset whose inputs are transform(dataset.inputs()) (one call over the whole tensor) and whose
// targets are shared with `dataset`.
std::shared_ptr<TensorDataset> map_inputs(const TensorDataset& dataset, const Transform& transform);

}  // namespace volt::data
