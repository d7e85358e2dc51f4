#include <volt/data/mnist.h>

#include <filesystem>
#include <sstream>

#include <volt/data/idx.h>
#include <volt/data/transforms.h>

namespace volt::data {

namespace fs = std::filesystem;

namespace {

std::string find_one(const std::string& dir, const std::vector<std::string>& names, const char* what,
                     bool train) {
  for (const auto& n : names) {
    fs::path p = fs::path(dir) / n;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::ostringstream os;
  for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
  VOLT_FAIL("MnistDataset::load: no ", train ? "training" : "test", " ", what, " file in '", dir,
            "': looked for ", os.str());
}

std::vector<std::string> candidates(const std::string& prefix, const std::string& kind, const std::string& idx) {
  // e.g. train-images-idx3-ubyte[.gz] and train-images.idx3-ubyte[.gz]
  const std::string a = prefix + "-" + kind + "-" + idx + "-ubyte", b = prefix + "-" + kind + "." + idx + "-ubyte";
  return {a, a + ".gz", b, b + ".gz"};
}

}  // namespace

MnistFiles find_mnist_files(const std::string& dir, bool train) {
  std::error_code ec;
  VOLT_CHECK(fs::is_directory(dir, ec), "MnistDataset::load: data directory '", dir, "' does not exist");
  const std::string prefix = train ? "train" : "t10k";
  MnistFiles f;
  f.images = find_one(dir, candidates(prefix, "images", "idx3"), "image", train);
  f.labels = find_one(dir, candidates(prefix, "labels", "idx1"), "label", train);
  return f;
}

std::shared_ptr<MnistDataset> MnistDataset::load(const std::string& dir, bool train) {
  const MnistFiles f = find_mnist_files(dir, train);
  Tensor images = read_idx(f.images, 3);  // (N, rows, cols) u8
  Tensor labels8 = read_idx(f.labels, 1);  // (N) u8
  VOLT_CHECK(images.size(0) == labels8.size(0), "MnistDataset::load: '", f.images, "' holds ", images.size(0),
             " images but '", f.labels, "' holds ", labels8.size(0), " labels; the counts must agree");
  Tensor labels = empty({labels8.size(0)}, DType::i64);
  const uint8_t* s = labels8.data<uint8_t>();
  int64_t* d = labels.data<int64_t>();
  for (int64_t i = 0; i < labels8.size(0); ++i) d[i] = s[i];
  return std::make_shared<MnistDataset>(std::move(images), std::move(labels));
}

std::shared_ptr<TensorDataset> MnistDataset::normalized(double mean, double std) const {
  Tensor x = normalize(to_float(inputs()), mean, std);
  Shape shape = x.shape();
  shape.insert(shape.begin() + 1, 1);  // (N, rows, cols) -> (N, 1, rows, cols): one channel, like ToTensor
  return std::make_shared<TensorDataset>(make_view(x, shape, contiguous_strides(shape), 0), targets());
}

}  // namespace volt::data
