#include <volt/data/image_folder.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <volt/data/image.h>

namespace volt::data {

namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

// Image files under `dir` (recursively, skipping hidden entries), sorted.
std::vector<std::string> images_under(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink);
       it != fs::recursive_directory_iterator(); ++it) {
    if (hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && is_image(it->path())) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions options)
    : root_(root), options_(std::move(options)) {
  VOLT_CHECK(options_.channels == 1 || options_.channels == 3, "ImageFolderDataset: channels must be 1 or 3, got ",
             options_.channels);
  std::error_code ec;
  VOLT_CHECK(fs::is_directory(root, ec), "ImageFolderDataset: root ", root, " is not a directory");
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && !hidden(e.path())) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  VOLT_CHECK(!classes_.empty(), "ImageFolderDataset: root ", root,
             " has no class folders; expected root/<class>/<image>.png|.jpg|.jpeg");
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    const auto files = images_under(dir);
    VOLT_CHECK(!files.empty(), "ImageFolderDataset: class folder ", dir.string(),
               " has no .png, .jpg or .jpeg images; remove it or add images");
    for (const auto& f : files) samples_.emplace_back(f, static_cast<int64_t>(c));
  }
  shape_ = load(0).shape();
}

const std::string& ImageFolderDataset::path(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < size(), "ImageFolderDataset: index ", index, " is out of range for ", size(),
             " images");
  return samples_[static_cast<size_t>(index)].first;
}

Tensor ImageFolderDataset::load(int64_t index) const {
  const std::string& file = path(index);
  Tensor x = read_image(file, options_.channels);
  if (options_.transform) {
    x = options_.transform(x);
    VOLT_CHECK(x.defined(), "ImageFolderDataset: options.transform returned an undefined tensor for ", file);
  }
  return x;
}

Batch ImageFolderDataset::get(int64_t index) const {
  Batch s;
  s.input = load(index);
  if (options_.check_size && index != 0)
    VOLT_CHECK(s.input.shape() == shape_, "ImageFolderDataset: ", path(index), " gives an input of shape ",
               s.input.shape_str(), " but ", path(0), " (sample 0) gives ", shape_to_string(shape_),
               "; all images must have one size (make them equal with options.transform, or set check_size = false "
               "when a loader sample_transform does)");
  s.target = scalar_tensor(static_cast<double>(samples_[static_cast<size_t>(index)].second), DType::i64);
  return s;
}

}  // namespace volt::data
