#pragma once
/// @file
/// Transforms.
///
/// Whole-dataset transforms (Transform). Volt applies deterministic transforms once, when the data is loaded,
/// and keeps the result in RAM as a float TensorDataset (the "preload to RAM" advice), instead of re-running
/// them on every sample of every epoch. All functions take and return CPU tensors and never record autograd
/// history.
///
/// Per-sample random transforms (SampleTransform, data/data_loader.h). Augmentations must differ per epoch, so
/// they run in the loader, on each sample, with the sample's own generator:
///
/// @code
///   DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 2, .seed = 7,
///                             .sample_transform = compose({random_crop(32, 32, 4), random_horizontal_flip()})});
/// @endcode
///
/// Each acts on sample.input (a CPU tensor, not recording history) and passes target and fields through. A
/// transform draws its numbers from the generator in a fixed order (documented per transform), so a composed
/// pipeline is a pure function of (sample, generator seed).
#include <functional>
#include <memory>
#include <vector>

#include <volt/data/data_loader.h>
#include <volt/data/dataset.h>

namespace volt::data {

using Transform = std::function<Tensor(const Tensor&)>;

/// u8 (...) -> f32 (...) with values x / 255 (torchvision's ToTensor scaling).
Tensor to_float(const Tensor& images);
/// f32 (...) -> f32 (...): (x - mean) / std, computed in f32 like torchvision's Normalize. std must be > 0.
Tensor normalize(const Tensor& x, double mean, double std);
/// Applies `transforms` left to right.
Transform compose(std::vector<Transform> transforms);
/// A TensorDataset whose inputs are transform(dataset.inputs()) (one call over the whole tensor) and whose
/// targets are shared with `dataset`.
std::shared_ptr<TensorDataset> map_inputs(const TensorDataset& dataset, const Transform& transform);

// ---- per-sample random transforms ----------------------------------------------------------------------------

/// input (C, H, W) or (H, W), any dtype -> (C, height, width) or (height, width): pads every side of the last
/// two dims with `padding` elements of value `fill`, then takes the (height, width) window at a uniformly random
/// offset (torchvision's RandomCrop(size, padding)). Draws one Philox counter: lane 0 picks the top row and lane
/// 1 the left column. height and width must fit in the padded image.
SampleTransform random_crop(int64_t height, int64_t width, int64_t padding = 0, double fill = 0);
/// input (..., W), at least 1-d, any dtype: reversed along the last dim with probability p, else unchanged.
/// Draws one Philox counter: flips when its lane 0 as a uniform [0, 1) float is < p.
SampleTransform random_horizontal_flip(double p = 0.5);
/// input f32 (...): x + N(mean, std^2) per element, the normals being randn(shape, f32, cpu, &gen, mean, std).
SampleTransform gaussian_noise(double std, double mean = 0);
/// Applies `transforms` left to right, all drawing from the same generator.
SampleTransform compose(std::vector<SampleTransform> transforms);

}  // namespace volt::data
