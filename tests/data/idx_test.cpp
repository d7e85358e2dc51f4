// IDX reader: good plain and gzip files, and every kind of broken file, each with its error message.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <string>

#include "common/gradcheck.h"
#include <volt/data/idx.h>
#include <volt/data/mnist.h>
#include "data/temp_dir.h"
#include <volt/kernels/ops.h>

namespace volt::data {
namespace {

using testing::TempDir;

// A u8 tensor (shape) with values (i * 7 + 3) % 256.
Tensor pattern(const Shape& shape) {
  std::vector<uint8_t> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 7 + 3) % 256);
  return from_vector(v, shape);
}

std::string header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
  return h;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Idx, PlainRoundTripKeepsShapeAndBytes) {
  TempDir dir;
  Tensor t = pattern({5, 4, 3});
  write_idx(dir.file("a-idx3-ubyte"), t);
  EXPECT_EQ(read_all(dir.file("a-idx3-ubyte")).size(), 16u + 60u);
  Tensor r = read_idx(dir.file("a-idx3-ubyte"), 3);
  EXPECT_EQ(r.dtype(), DType::u8);
  EXPECT_EQ(r.shape(), (Shape{5, 4, 3}));
  EXPECT_EQ(r.to_vector<int>(), t.to_vector<int>());
}

TEST(Idx, GzipIsDetectedByMagicBytesNotName) {
  TempDir dir;
  Tensor t = pattern({7});
  write_idx(dir.file("labels.gz"), t, /*gzip=*/true);
  write_idx(dir.file("labels_no_suffix"), t, /*gzip=*/true);
  const std::string raw = read_all(dir.file("labels_no_suffix"));
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(raw[0]), 0x1f);
  EXPECT_EQ(static_cast<uint8_t>(raw[1]), 0x8b);
  EXPECT_EQ(read_idx(dir.file("labels.gz"), 1).to_vector<int>(), t.to_vector<int>());
  EXPECT_EQ(read_idx(dir.file("labels_no_suffix"), 1).to_vector<int>(), t.to_vector<int>());
}

TEST(Idx, MissingFileNamesThePath) {
  TempDir dir;
  VOLT_EXPECT_ERROR(read_idx(dir.file("nope-idx1-ubyte")), "cannot open", "nope-idx1-ubyte");
}

TEST(Idx, WrongMagicIsRejected) {
  TempDir dir;
  write_raw(dir.file("bad"), std::string("PK\x03\x04 not an idx file", 21));
  VOLT_EXPECT_ERROR(read_idx(dir.file("bad")), "not an IDX file", "0x504b0304", "bad");
}

TEST(Idx, WrongDtypeByteIsRejected) {
  TempDir dir;
  write_raw(dir.file("floats"), header(0x0D, {2}) + std::string(8, '\0'));
  VOLT_EXPECT_ERROR(read_idx(dir.file("floats")), "element type byte 0x0d", "0x00000d01", "0x08");
}

TEST(Idx, WrongDimensionCountIsRejected) {
  TempDir dir;
  write_idx(dir.file("labels"), pattern({4}));
  VOLT_EXPECT_ERROR(read_idx(dir.file("labels"), 3), "0x00000801", "0x00000803", "1 dimensions");
}

TEST(Idx, TruncatedPlainFileReportsBothSizes) {
  TempDir dir;
  write_raw(dir.file("trunc"), header(0x08, {3, 2, 2}) + std::string(10, 'x'));  // needs 12 data bytes
  VOLT_EXPECT_ERROR(read_idx(dir.file("trunc")), "truncated", "needs 28 bytes", "has 26 bytes", "trunc");
}

TEST(Idx, TrailingBytesAreRejected) {
  TempDir dir;
  write_raw(dir.file("long"), header(0x08, {3}) + std::string(5, 'x'));
  VOLT_EXPECT_ERROR(read_idx(dir.file("long")), "trailing bytes", "needs 11 bytes", "has 13 bytes");
}

TEST(Idx, TruncatedHeaderIsRejected) {
  TempDir dir;
  write_raw(dir.file("short"), std::string("\0\0\x08\x03\0\0", 6));
  VOLT_EXPECT_ERROR(read_idx(dir.file("short")), "truncated", "needs 16");
  write_raw(dir.file("tiny"), std::string("\0\0", 2));
  VOLT_EXPECT_ERROR(read_idx(dir.file("tiny")), "too short", "2 bytes");
}

TEST(Idx, DimensionProductOverflowIsRejected) {
  TempDir dir;
  // 65536^4 = 2^64 wraps to 0 in 64-bit arithmetic: without checked multiplication the header alone looked
  // like a complete file holding 0 bytes of data.
  write_raw(dir.file("wrap"), header(0x08, {65536, 65536, 65536, 65536}));
  VOLT_EXPECT_ERROR(read_idx(dir.file("wrap")), "wrap", "(65536, 65536, 65536, 65536)", "overflows");
  // (2^32 - 1) * 2^16 fits 64 bits but far exceeds the bytes present.
  write_raw(dir.file("huge"), header(0x08, {0xffffffffu, 0x10000u}) + std::string(4, 'x'));
  VOLT_EXPECT_ERROR(read_idx(dir.file("huge")), "huge", "truncated", "has 16 bytes");
}

TEST(Idx, TruncatedGzipDataIsRejected) {
  TempDir dir;
  // A complete gzip stream whose decompressed payload is short of what the header declares.
  write_gz(dir.file("short.gz"), header(0x08, {4, 4}) + std::string(15, 'x'));
  VOLT_EXPECT_ERROR(read_idx(dir.file("short.gz")), "truncated", "needs 28 bytes", "has 27 bytes after decompression");
}

TEST(Idx, CutGzipStreamIsRejected) {
  TempDir dir;
  write_idx(dir.file("full.gz"), pattern({64, 64}), true);
  std::string raw = read_all(dir.file("full.gz"));
  write_raw(dir.file("cut.gz"), raw.substr(0, raw.size() / 2));
  VOLT_EXPECT_ERROR(read_idx(dir.file("cut.gz")), "cut.gz", "corrupt or truncated gzip");
}

// ---- MNIST file discovery and count checks on synthetic files -------------------------------------------------

void write_split(const TempDir& dir, const std::string& prefix, int64_t n_images, int64_t n_labels, bool gz) {
  const std::string sfx = gz ? ".gz" : "";
  write_idx(dir.file(prefix + "-images-idx3-ubyte" + sfx), pattern({n_images, 28, 28}), gz);
  std::vector<uint8_t> labels(static_cast<size_t>(n_labels));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i % 10);
  write_idx(dir.file(prefix + "-labels-idx1-ubyte" + sfx), from_vector(labels), gz);
}

TEST(Mnist, LoadsPlainAndGzipSplits) {
  TempDir dir;
  write_split(dir, "train", 12, 12, /*gz=*/false);
  write_split(dir, "t10k", 5, 5, /*gz=*/true);
  auto train = MnistDataset::load(dir.str(), true);
  auto test = MnistDataset::load(dir.str(), false);
  EXPECT_EQ(train->size(), 12);
  EXPECT_EQ(test->size(), 5);
  EXPECT_EQ(train->inputs().shape(), (Shape{12, 28, 28}));
  EXPECT_EQ(train->targets().dtype(), DType::i64);
  EXPECT_EQ(train->get(11).target.item<int>(), 1);
  EXPECT_EQ(test->get(4).target.item<int>(), 4);
  EXPECT_EQ(train->get(0).input.to_vector<int>()[1], 10);  // pattern: (1 * 7 + 3)
}

TEST(Mnist, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_split(dir, "train", 10, 9, false);
  VOLT_EXPECT_ERROR(MnistDataset::load(dir.str(), true), "10 images", "9 labels", "train-images-idx3-ubyte",
                    "train-labels-idx1-ubyte");
}

TEST(Mnist, MissingFilesListWhatWasLookedFor) {
  TempDir dir;
  const std::string where = dir.str();
  VOLT_EXPECT_ERROR(MnistDataset::load(where, false), "no test image file", "t10k-images-idx3-ubyte",
                    "t10k-images-idx3-ubyte.gz", where.c_str());
  write_split(dir, "t10k", 3, 3, false);
  std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte"));
  VOLT_EXPECT_ERROR(MnistDataset::load(dir.str(), false), "no test label file", "t10k-labels-idx1-ubyte.gz");
  VOLT_EXPECT_ERROR(MnistDataset::load(dir.file("absent"), true), "does not exist", "absent");
}

TEST(Mnist, ImagesWithLabelMagicAreRejected) {
  TempDir dir;
  write_split(dir, "train", 4, 4, false);
  write_idx(dir.file("train-images-idx3-ubyte"), pattern({4}));  // a labels file where images belong
  VOLT_EXPECT_ERROR(MnistDataset::load(dir.str(), true), "0x00000801", "0x00000803");
}

TEST(Mnist, NormalizedMatchesTheTemplateTransform) {
  TempDir dir;
  write_split(dir, "train", 3, 3, false);
  auto raw = MnistDataset::load(dir.str(), true);
  auto ds = raw->normalized();
  EXPECT_EQ(ds->inputs().shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(ds->inputs().dtype(), DType::f32);
  const auto x = ds->inputs().to_vector<float>();
  const auto u = raw->inputs().to_vector<int>();
  for (size_t i : {size_t{0}, size_t{1}, size_t{500}, size_t{2351}}) {
    const float expect = (static_cast<float>(u[i]) / 255.0f - 0.1307f) / 0.3081f;
    EXPECT_FLOAT_EQ(x[i], expect) << i;
  }
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

// ---- the installed Fashion-MNIST ------------------------------------------------------------------------------

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";

TEST(Mnist, RealFashionMnistLoads) {
  if (!std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed under " << kFashion;
  auto train = MnistDataset::load(kFashion, true);
  auto test = MnistDataset::load(kFashion, false);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->inputs().shape(), (Shape{60000, 28, 28}));
  for (auto* ds : {train.get(), test.get()}) {
    std::vector<int64_t> counts(10, 0);
    for (int64_t y : ds->targets().to_vector<int64_t>()) {
      ASSERT_GE(y, 0);
      ASSERT_LT(y, 10);
      ++counts[static_cast<size_t>(y)];
    }
    for (int64_t c : counts) EXPECT_EQ(c, ds->size() / 10);  // Fashion-MNIST is exactly balanced
  }
}

}  // namespace
}  // namespace volt::data
