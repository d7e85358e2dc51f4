#pragma once
/// @file
/// ImageFolderDataset: a classification dataset laid out as one folder per class (torchvision's ImageFolder).
///
/// @code{.unparsed}
///   root/cat/001.png          classes() = {"cat", "dog"}   (sorted folder names; class index = position)
///   root/cat/002.jpg          sample i: input f32 (C, H, W) in [0, 1], target i64 () = class index
///   root/dog/a/003.jpeg       samples sorted by (class, path); subfolders of a class folder are searched too
/// @endcode
///
/// @code
///   auto train = std::make_shared<ImageFolderDataset>("data/train", ImageFolderOptions{.channels = 3});
///   DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 4,
///                             .sample_transform = random_horizontal_flip()});
/// @endcode
///
/// Files. .png, .jpg and .jpeg (any case) are images, decoded by data/image.h (the signature decides the
/// format); other files and folders whose name starts with '.' are ignored. The constructor only lists files and
/// decodes the first image (to learn the sample shape); get(i) reads and decodes file i, so memory stays small
/// and decoding runs in the loader's workers.
///
/// Size. Nothing is resized: every sample must have the shape of sample 0 (after options.transform, which can
/// make them equal, e.g. a center crop), else get() throws naming both files. Set check_size = false when a
/// loader sample_transform makes them equal (a random crop); stacking unequal samples still fails then, naming
/// the batch.
///
/// Errors (volt::Error): a missing root, a root without class folders, a class folder without images (naming
/// it), and an unreadable or corrupt file (naming it, from get()).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <volt/data/dataset.h>
#include <volt/data/transforms.h>

namespace volt::data {

struct ImageFolderOptions {
  int channels = 3;        ///< 3: RGB (gray images are repeated), 1: gray (RGB images become luma)
  Transform transform;     ///< optional, deterministic: f32 (channels, H, W) -> the sample's input, in get()
  bool check_size = true;  ///< every input must have sample 0's shape
};

class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(const std::string& root, ImageFolderOptions options = {});
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  /// input f32 (channels, H, W) in [0, 1] (or what options.transform makes of it), target i64 () class index.
  Batch get(int64_t index) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  /// (path, class index) of every sample, in sample order.
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }
  const std::string& path(int64_t index) const;
  /// The shape every input has (sample 0's).
  const Shape& sample_shape() const { return shape_; }

 private:
  Tensor load(int64_t index) const;
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> samples_;
  Shape shape_;
};

}  // namespace volt::data
