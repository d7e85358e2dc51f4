// ImageFolderDataset and the PNG/JPEG decoder: layout (classes, order, labels), pixel values and channel
// conversion, size checks, errors naming the file, and loading through DataLoader workers.
#include <gtest/gtest.h>

#include <cmath>

#include <volt/data/data_loader.h>
#include <volt/data/image.h>
#include <volt/data/image_folder.h>
#include "common/error_message.h"
#include <volt/kernels/ops.h>
#include "image_files.h"
#include "temp_dir.h"

namespace volt::data {
namespace {

using testing::TempDir;
using testing::write_bytes;
using testing::write_jpeg;
using testing::write_png;

using volt::testing::message_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// (H, W, C) pixels with value (17 y + 5 x + 60 c + seed) % 256.
std::vector<uint8_t> pattern(int w, int h, int c, int seed = 0) {
  std::vector<uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) px.push_back(uint8_t((17 * y + 5 * x + 60 * k + seed) % 256));
  return px;
}

// (H, W, C) interleaved -> (C, H, W) planar floats / 255.
std::vector<float> planar(const std::vector<uint8_t>& px, int w, int h, int c) {
  std::vector<float> out(px.size());
  for (int k = 0; k < c; ++k)
    for (int i = 0; i < w * h; ++i) out[size_t(k) * w * h + i] = float(px[size_t(i) * c + k]) / 255.0f;
  return out;
}

TEST(ImageFolder, ClassesSamplesAndLabelsFollowTheSortedLayout) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/dog/b.png", 3, 2, 3, pattern(3, 2, 3, 1));
  write_png(root + "/dog/a.PNG", 3, 2, 3, pattern(3, 2, 3, 2));
  write_jpeg(root + "/dog/sub/c.jpeg", 3, 2, 3, pattern(3, 2, 3, 3));
  write_png(root + "/cat/z.png", 3, 2, 3, pattern(3, 2, 3, 4));
  write_jpeg(root + "/cat/y.jpg", 3, 2, 3, pattern(3, 2, 3, 5));
  write_bytes(root + "/cat/notes.txt", "not an image");
  write_png(root + "/cat/.hidden/x.png", 9, 9, 3, pattern(9, 9, 3));
  write_png(root + "/.cache/x.png", 9, 9, 3, pattern(9, 9, 3));
  write_bytes(root + "/README", "a file at the root is not a class");
  ImageFolderDataset ds(root);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(ds.size(), 5);
  const std::vector<std::pair<std::string, int64_t>> want{{root + "/cat/y.jpg", 0},
                                                          {root + "/cat/z.png", 0},
                                                          {root + "/dog/a.PNG", 1},
                                                          {root + "/dog/b.png", 1},
                                                          {root + "/dog/sub/c.jpeg", 1}};
  EXPECT_EQ(ds.samples(), want);
  EXPECT_EQ(ds.sample_shape(), (Shape{3, 2, 3}));
  for (int64_t i = 0; i < 5; ++i) {
    Batch s = ds.get(i);
    EXPECT_EQ(s.target.dtype(), DType::i64);
    EXPECT_EQ(s.target.dim(), 0);
    EXPECT_EQ(s.target.item<int64_t>(), want[i].second);
    EXPECT_EQ(s.input.dtype(), DType::f32);
    EXPECT_EQ(s.input.shape(), (Shape{3, 2, 3}));
  }
  EXPECT_EQ(ds.get(3).input.to_vector<float>(), planar(pattern(3, 2, 3, 1), 3, 2, 3));  // dog/b.png, exact
  EXPECT_EQ(ds.path(2), root + "/dog/a.PNG");
  EXPECT_EQ(message_of([&] { ds.get(5); }), "ImageFolderDataset: index 5 is out of range for 5 images");
}

TEST(ImageFolder, PngPixelValuesAndChannelConversions) {
  TempDir dir;
  const std::string root = dir.file("root");
  const auto rgb = pattern(4, 3, 3), gray = pattern(4, 3, 1, 7), rgba = pattern(4, 3, 4, 9), ga = pattern(4, 3, 2, 11);
  write_png(root + "/a/0_rgb.png", 4, 3, 3, rgb);
  write_png(root + "/a/1_gray.png", 4, 3, 1, gray);
  write_png(root + "/a/2_rgba.png", 4, 3, 4, rgba);
  write_png(root + "/a/3_ga.png", 4, 3, 2, ga);
  ImageFolderDataset color(root, {.channels = 3});
  EXPECT_EQ(color.get(0).input.to_vector<float>(), planar(rgb, 4, 3, 3));
  std::vector<uint8_t> gray3, rgba3, ga3;
  for (size_t i = 0; i < 12; ++i) {
    for (int k = 0; k < 3; ++k) {
      gray3.push_back(gray[i]);
      rgba3.push_back(rgba[i * 4 + k]);  // alpha dropped, colours untouched
      ga3.push_back(ga[i * 2]);
    }
  }
  EXPECT_EQ(color.get(1).input.to_vector<float>(), planar(gray3, 4, 3, 3));
  EXPECT_EQ(color.get(2).input.to_vector<float>(), planar(rgba3, 4, 3, 3));
  EXPECT_EQ(color.get(3).input.to_vector<float>(), planar(ga3, 4, 3, 3));

  ImageFolderDataset mono(root, {.channels = 1});
  EXPECT_EQ(mono.sample_shape(), (Shape{1, 3, 4}));
  std::vector<uint8_t> luma;
  for (size_t i = 0; i < 12; ++i)
    luma.push_back(uint8_t((19595u * rgb[i * 3] + 38470u * rgb[i * 3 + 1] + 7471u * rgb[i * 3 + 2] + 32768u) >> 16));
  EXPECT_EQ(mono.get(0).input.to_vector<float>(), planar(luma, 4, 3, 1));
  EXPECT_EQ(mono.get(1).input.to_vector<float>(), planar(gray, 4, 3, 1));
  // Spot values: black, white and pure red in gray.
  write_png(dir.file("px.png"), 3, 1, 3, {0, 0, 0, 255, 255, 255, 255, 0, 0});
  EXPECT_EQ(read_image(dir.file("px.png"), 1).to_vector<float>(), (std::vector<float>{0, 1, 76 / 255.0f}));
  EXPECT_EQ(message_of([&] { ImageFolderDataset(root, {.channels = 2}); }),
            "ImageFolderDataset: channels must be 1 or 3, got 2");
}

TEST(ImageFolder, JpegPixelValues) {
  TempDir dir;
  // A flat image survives JPEG exactly; a smooth gradient within a few levels at quality 95.
  write_jpeg(dir.file("flat.jpg"), 16, 8, 1, std::vector<uint8_t>(16 * 8, 77), 100);
  EXPECT_EQ(read_image(dir.file("flat.jpg"), 1).to_vector<float>(), std::vector<float>(16 * 8, 77 / 255.0f));
  std::vector<uint8_t> rgb;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int k = 0; k < 3; ++k) rgb.push_back(uint8_t(20 + 6 * x + 3 * y + 20 * k));
  write_jpeg(dir.file("grad.jpg"), 16, 16, 3, rgb, 95);
  Tensor img = read_image(dir.file("grad.jpg"), 3);
  ASSERT_EQ(img.shape(), (Shape{3, 16, 16}));
  const auto got = img.to_vector<float>(), want = planar(rgb, 16, 16, 3);
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, 6 / 255.0f);
  // The gray JPEG as RGB repeats its channel.
  auto flat3 = read_image(dir.file("flat.jpg"), 3).to_vector<float>();
  EXPECT_EQ(flat3, std::vector<float>(3 * 16 * 8, 77 / 255.0f));
}

TEST(ImageFolder, LayoutErrorsNameThePath) {
  TempDir dir;
  EXPECT_EQ(message_of([&] { ImageFolderDataset(dir.file("missing")); }),
            "ImageFolderDataset: root " + dir.file("missing") + " is not a directory");
  EXPECT_EQ(message_of([&] { ImageFolderDataset(dir.str()); }),
            "ImageFolderDataset: root " + dir.str() + " has no class folders; expected root/<class>/<image>.png|.jpg|.jpeg");
  write_png(dir.file("cat/a.png"), 2, 2, 1, {1, 2, 3, 4});
  write_bytes(dir.file("dog/readme.txt"), "no images here");
  EXPECT_EQ(message_of([&] { ImageFolderDataset(dir.str()); }),
            "ImageFolderDataset: class folder " + dir.file("dog") +
                " has no .png, .jpg or .jpeg images; remove it or add images");
}

TEST(ImageFolder, CorruptAndTruncatedFilesAreErrorsNamingTheFile) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/a/0.png", 8, 8, 3, pattern(8, 8, 3));
  write_jpeg(root + "/a/1.jpg", 8, 8, 3, pattern(8, 8, 3));
  const std::string png = testing::read_bytes(root + "/a/0.png"), jpg = testing::read_bytes(root + "/a/1.jpg");
  write_bytes(root + "/a/2_garbage.png", "GIF89a this is not a png");
  write_bytes(root + "/a/3_trunc.png", png.substr(0, png.size() / 2));
  write_bytes(root + "/a/4_trunc.jpg", jpg.substr(0, jpg.size() / 2));
  std::string bad_crc = png;
  bad_crc[png.size() / 2] ^= 0x55;  // inside the IDAT chunk
  write_bytes(root + "/a/5_crc.png", bad_crc);
  ImageFolderDataset ds(root);
  ASSERT_EQ(ds.size(), 6);
  EXPECT_EQ(message_of([&] { ds.get(2); }),
            "read_image: " + root + "/a/2_garbage.png is neither a PNG nor a JPEG file (unknown signature)");
  const std::string trunc_png = message_of([&] { ds.get(3); });
  // libpng's own message follows ("read beyond end of data", a CRC error, ...).
  EXPECT_TRUE(contains(trunc_png, "read_image: " + root + "/a/3_trunc.png is ") && contains(trunc_png, " PNG file: "))
      << trunc_png;
  const std::string trunc_jpg = message_of([&] { ds.get(4); });
  EXPECT_EQ(trunc_jpg, "read_image: " + root + "/a/4_trunc.jpg is not a readable JPEG file: Premature end of JPEG file");
  const std::string crc = message_of([&] { ds.get(5); });
  EXPECT_TRUE(contains(crc, "read_image: " + root + "/a/5_crc.png is ") && contains(crc, " PNG file: ")) << crc;
  // The first image is decoded by the constructor, so a corrupt one fails there.
  write_bytes(dir.file("r2/a/0.png"), png.substr(0, 20));
  EXPECT_TRUE(contains(message_of([&] { ImageFolderDataset(dir.file("r2")); }), dir.file("r2/a/0.png")));
  // A loader reports the failing sample and batch.
  DataLoader loader(std::make_shared<ImageFolderDataset>(root), {.batch_size = 2, .num_workers = 2});
  EXPECT_TRUE(contains(message_of([&] { while (loader.next()) {} }), "2_garbage.png"));
}

TEST(ImageFolder, ImagesOfAnotherSizeAreAnErrorUnlessMadeEqual) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/a/0.png", 4, 4, 3, pattern(4, 4, 3));
  write_png(root + "/b/big.png", 5, 6, 3, pattern(5, 6, 3));
  ImageFolderDataset ds(root);
  EXPECT_EQ(message_of([&] { ds.get(1); }),
            "ImageFolderDataset: " + root + "/b/big.png gives an input of shape (3, 6, 5) but " + root +
                "/a/0.png (sample 0) gives (3, 4, 4); all images must have one size (make them equal with "
                "options.transform, or set check_size = false when a loader sample_transform does)");
  // A deterministic transform that crops the top-left 3x3 makes them equal.
  ImageFolderDataset cropped(root, {.transform = [](const Tensor& x) { return x.slice(1, 0, 3).slice(2, 0, 3).contiguous(); }});
  EXPECT_EQ(cropped.sample_shape(), (Shape{3, 3, 3}));
  EXPECT_EQ(cropped.get_batch({0, 1}).input.shape(), (Shape{2, 3, 3, 3}));
  EXPECT_FLOAT_EQ(cropped.get(1).input.to_vector<float>()[3 + 2], pattern(5, 6, 3)[(1 * 5 + 2) * 3] / 255.0f);
  // Without the check, a loader's random crop can make them equal.
  ImageFolderOptions unchecked{.check_size = false};
  auto ds2 = std::make_shared<ImageFolderDataset>(root, unchecked);
  EXPECT_EQ(ds2->get(1).input.shape(), (Shape{3, 6, 5}));
  DataLoader loader(ds2, {.batch_size = 2, .sample_transform = random_crop(3, 3)});
  EXPECT_EQ(loader.next()->input.shape(), (Shape{2, 3, 3, 3}));
}

TEST(ImageFolder, LoaderWorkersDecodeTheSameBatches) {
  TempDir dir;
  const std::string root = dir.file("root");
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i) {
      const std::string name = root + "/class" + std::to_string(c) + "/" + std::to_string(i);
      if (i % 2) write_png(name + ".png", 6, 5, 3, pattern(6, 5, 3, 10 * c + i));
      else write_jpeg(name + ".jpg", 6, 5, 3, pattern(6, 5, 3, 10 * c + i));
    }
  auto ds = std::make_shared<ImageFolderDataset>(root);
  ASSERT_EQ(ds->size(), 12);
  auto run = [&](int workers) {
    DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 3,
                           .sample_transform = random_horizontal_flip()});
    std::vector<std::vector<float>> inputs;
    std::vector<int64_t> labels;
    for (const Batch& b : loader) {
      inputs.push_back(b.input.to_vector<float>());
      auto t = b.target.to_vector<int64_t>();
      labels.insert(labels.end(), t.begin(), t.end());
    }
    return std::make_pair(inputs, labels);
  };
  auto serial = run(0), parallel = run(2);
  EXPECT_EQ(serial, parallel);
  std::vector<int64_t> sorted = serial.second;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
}

// The example of docs/datasets.md (section "Image folders, named fields, collate and augmentation"), on 5 + 3 images.
TEST(ImageFolder, ReadmeExample) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) write_png(dir.file("pets/train/cat/" + std::to_string(i) + ".png"), 32, 32, 3, pattern(32, 32, 3, i));
  for (int i = 0; i < 3; ++i) write_jpeg(dir.file("pets/train/dog/" + std::to_string(i) + ".jpg"), 32, 32, 1, pattern(32, 32, 1, i));
  auto train = std::make_shared<ImageFolderDataset>(dir.file("pets/train"), ImageFolderOptions{.channels = 3});
  DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 4, .seed = 7,
                            .collate = [](std::vector<Batch>& samples) {
                              Batch b = default_collate(samples);
                              b.fields["weight"] = volt::ones({b.size()});  // per-sample loss weights
                              return b;
                            },
                            .sample_transform = compose({random_crop(32, 32, /*padding=*/4),
                                                         random_horizontal_flip(0.5)})});
  EXPECT_EQ(train->classes(), (std::vector<std::string>{"cat", "dog"}));
  int batches = 0;
  for (const Batch& b : loader) {
    ++batches;
    EXPECT_EQ(b.input.shape(), (Shape{8, 3, 32, 32}));
    auto t = b.target.to_vector<int64_t>();
    EXPECT_EQ(std::count(t.begin(), t.end(), 0), 5);
    EXPECT_EQ(b.field("weight").to_vector<float>(), std::vector<float>(8, 1.0f));
  }
  EXPECT_EQ(batches, 1);
}

TEST(DecodeImage, SignatureSizeLimitAndChannelErrors) {
  const std::string jpg = testing::jpeg_bytes(4, 4, 1, std::vector<uint8_t>(16, 200), 100);
  const auto* p = reinterpret_cast<const uint8_t*>(jpg.data());
  Tensor t = decode_image(p, jpg.size(), 1, "mem.jpg");
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.to_vector<int64_t>(), std::vector<int64_t>(16, 200));
  EXPECT_EQ(message_of([&] { decode_image(p, jpg.size(), 1, "mem.jpg", 15); }),
            "read_image: mem.jpg is not a readable JPEG file: 4x4 pixels; at most 15 pixels are accepted");
  EXPECT_EQ(message_of([&] { decode_image(p, 2, 1, "short"); }),
            "read_image: short is neither a PNG nor a JPEG file (unknown signature)");
  EXPECT_EQ(message_of([&] { decode_image(p, jpg.size(), 4, "mem.jpg"); }), "read_image: channels must be 1 or 3, got 4");
  EXPECT_EQ(message_of([&] { read_image("/nonexistent/x.png", 3); }), "read_image: cannot open /nonexistent/x.png");
}

}  // namespace
}  // namespace volt::data
