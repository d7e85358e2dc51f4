// Per-sample random transforms: the ready-made ones (values for known generator seeds, errors) and the
// DataLoader's sample_transform stage (per-sample seeds, same batches for any num_workers, new draws each epoch).
#include <gtest/gtest.h>

#include <set>

#include <volt/data/data_loader.h>
#include <volt/data/transforms.h>
#include <volt/kernels/common/philox.h>
#include "common/error_message.h"
#include <volt/kernels/ops.h>

namespace volt::data {
namespace {

using volt::testing::message_of;

Batch sample_of(Tensor x) {
  Batch s;
  s.input = std::move(x);
  s.target = scalar_tensor(7, DType::i64);
  s.fields["id"] = scalar_tensor(3, DType::i64);
  return s;
}

// (C, H, W) f32 with element (c, y, x) = 100 c + 10 y + x.
Tensor grid(int64_t C, int64_t H, int64_t W) {
  std::vector<float> v;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) v.push_back(float(100 * c + 10 * y + x));
  return from_vector(v, {C, H, W});
}

// The documented draws: counter `k` of a fresh generator seeded `seed`.
philox::U4 counter(uint64_t seed, uint64_t k) { return philox::philox4x32_10(k, 0, seed); }
int64_t below(uint32_t bits, int64_t n) { return int64_t((uint64_t(bits) * uint64_t(n)) >> 32); }
bool flips(uint64_t seed, uint64_t k, double p) { return philox::uniform(counter(seed, k).x[0]) < p; }

TEST(RandomCrop, TakesTheDocumentedWindowOfThePaddedImage) {
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    Generator gen(seed);
    Batch out = random_crop(3, 4, 1, -5)(sample_of(grid(2, 4, 5)), gen);
    const philox::U4 r = counter(seed, 0);
    const int64_t top = below(r.x[0], 4 + 2 - 3 + 1) - 1, left = below(r.x[1], 5 + 2 - 4 + 1) - 1;
    seen.insert({top, left});
    ASSERT_EQ(out.input.shape(), (Shape{2, 3, 4}));
    const auto v = out.input.to_vector<float>();
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < 3; ++y)
        for (int64_t x = 0; x < 4; ++x) {
          const int64_t sy = top + y, sx = left + x;
          const float want = sy < 0 || sy >= 4 || sx < 0 || sx >= 5 ? -5.0f : float(100 * c + 10 * sy + sx);
          ASSERT_EQ(v[(c * 3 + y) * 4 + x], want) << "seed " << seed << " at " << c << "," << y << "," << x;
        }
    EXPECT_EQ(out.target.item<int64_t>(), 7);  // target and fields pass through
    EXPECT_EQ(out.field("id").item<int64_t>(), 3);
    EXPECT_EQ(gen.offset(), 1u);  // one counter drawn
  }
  EXPECT_EQ(seen.size(), 4u * 4u);  // every window of the padded 6x7 image occurs
}

TEST(RandomCrop, TwoDimensionalIntegerInputAndErrors) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).to(DType::u8);
  Generator gen(5);
  Batch out = random_crop(2, 2)(sample_of(x), gen);  // the only window
  EXPECT_EQ(out.input.dtype(), DType::u8);
  EXPECT_EQ(out.input.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(message_of([&] { random_crop(3, 2)(sample_of(x), gen); }),
            "random_crop: cannot crop 3x2 from a 2x2 image padded by 0 (2x2)");
  EXPECT_EQ(message_of([&] { random_crop(1, 1)(sample_of(ones({4})), gen); }),
            "random_crop: input must be a CPU (C, H, W) or (H, W) tensor, got (4,) float32 on cpu");
  EXPECT_EQ(message_of([] { random_crop(0, 2); }), "random_crop: size must be >= 1 and padding >= 0, got 0x2 with padding 0");
}

TEST(RandomHorizontalFlip, FlipsExactlyWhenTheDrawIsBelowP) {
  int flipped = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Generator gen(seed);
    Batch out = random_horizontal_flip(0.3)(sample_of(grid(2, 2, 3)), gen);
    const bool want = flips(seed, 0, 0.3);
    flipped += want;
    const std::vector<float> expect = want ? std::vector<float>{2, 1, 0, 12, 11, 10, 102, 101, 100, 112, 111, 110}
                                           : grid(2, 2, 3).to_vector<float>();
    EXPECT_EQ(out.input.to_vector<float>(), expect) << "seed " << seed;
    EXPECT_EQ(gen.offset(), 1u);
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 40);
  Generator gen(1);
  EXPECT_EQ(random_horizontal_flip(1.0)(sample_of(from_vector(std::vector<float>{1, 2, 3})), gen).input.to_vector<float>(),
            (std::vector<float>{3, 2, 1}));
  EXPECT_EQ(random_horizontal_flip(0.0)(sample_of(from_vector(std::vector<float>{1, 2, 3})), gen).input.to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(message_of([] { random_horizontal_flip(1.5); }), "random_horizontal_flip: p must be in [0, 1], got 1.5");
  EXPECT_EQ(message_of([&] { random_horizontal_flip()(sample_of(scalar_tensor(1)), gen); }),
            "random_horizontal_flip: input must be a CPU tensor of at least 1 dim, got () float32 on cpu");
}

TEST(GaussianNoise, AddsTheGeneratorsNormals) {
  Generator gen(9), ref(9);
  Tensor x = grid(1, 2, 3);
  Batch out = gaussian_noise(0.5, 2.0)(sample_of(x), gen);
  auto noise = randn({1, 2, 3}, DType::f32, kCPU, &ref, 2.0, 0.5).to_vector<float>();
  auto xs = x.to_vector<float>(), got = out.input.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(got[i], xs[i] + noise[i]) << i;
  EXPECT_NE(got, xs);
  EXPECT_EQ(gen.offset(), ref.offset());
  EXPECT_EQ(message_of([&] { gaussian_noise(1)(sample_of(x.to(DType::u8)), gen); }),
            "gaussian_noise: input must be a CPU f32 tensor, got (1, 2, 3) uint8 on cpu");
  EXPECT_EQ(message_of([] { gaussian_noise(-1); }), "gaussian_noise: std must be >= 0, got -1");
}

TEST(ComposeSampleTransforms, AppliesInOrderFromOneGenerator) {
  // Crop (counter 0) then flip (counter 1): find a seed that flips, then check the values.
  uint64_t seed = 0;
  while (!flips(seed, 1, 0.5)) ++seed;
  Generator gen(seed);
  Batch out = compose({random_crop(2, 2), random_horizontal_flip()})(sample_of(grid(1, 3, 3)), gen);
  const philox::U4 r = counter(seed, 0);
  const float top = float(below(r.x[0], 2)), left = float(below(r.x[1], 2));
  EXPECT_EQ(out.input.to_vector<float>(), (std::vector<float>{10 * top + left + 1, 10 * top + left,
                                                              10 * (top + 1) + left + 1, 10 * (top + 1) + left}));
  EXPECT_EQ(gen.offset(), 2u);
  EXPECT_EQ(message_of([] { compose(std::vector<SampleTransform>{random_horizontal_flip(), nullptr}); }),
            "compose: sample transform 1 is empty");
}

TEST(SampleSeed, DependsOnSeedEpochAndIndex) {
  std::set<uint64_t> seeds;
  for (uint64_t s : {0, 1})
    for (int64_t e : {0, 1, 2})
      for (int64_t i : {0, 1, 2, 1000}) seeds.insert(sample_seed(s, e, i));
  EXPECT_EQ(seeds.size(), 24u);
  EXPECT_EQ(sample_seed(5, 2, 7), sample_seed(5, 2, 7));
}

// n samples, input (1, 1, 4) = (i, i+1, i+2, i+3) / 10, target i.
std::shared_ptr<TensorDataset> rows(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < 4; ++k) x.push_back(float(i + k) / 10);
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 1, 1, 4}), from_vector(y, {n}));
}

// Per epoch: target -> the sample's input values.
std::vector<std::map<int64_t, std::vector<float>>> run(DataLoader& loader, int epochs) {
  std::vector<std::map<int64_t, std::vector<float>>> out;
  for (int e = 0; e < epochs; ++e) {
    loader.set_epoch(e);
    std::map<int64_t, std::vector<float>> m;
    for (const Batch& b : loader) {
      auto t = b.target.to_vector<int64_t>();
      auto x = b.input.to_vector<float>();
      const size_t per = x.size() / t.size();
      for (size_t k = 0; k < t.size(); ++k) m[t[k]] = std::vector<float>(x.begin() + k * per, x.begin() + (k + 1) * per);
    }
    out.push_back(std::move(m));
  }
  return out;
}

TEST(LoaderSampleTransform, FlipsTheSamplesTheirSeedsSayInEveryEpoch) {
  const uint64_t seed = 11;
  DataLoader loader(rows(9), {.batch_size = 4, .shuffle = true, .seed = seed,
                              .sample_transform = random_horizontal_flip()});
  auto epochs = run(loader, 3);
  int changed = 0;
  for (int e = 0; e < 3; ++e) {
    ASSERT_EQ(epochs[e].size(), 9u);
    for (int64_t i = 0; i < 9; ++i) {
      std::vector<float> want{float(i) / 10, float(i + 1) / 10, float(i + 2) / 10, float(i + 3) / 10};
      if (flips(sample_seed(seed, e, i), 0, 0.5)) std::reverse(want.begin(), want.end());
      EXPECT_EQ(epochs[e][i], want) << "epoch " << e << " sample " << i;
      if (e > 0 && epochs[e][i] != epochs[0][i]) ++changed;
    }
  }
  EXPECT_GT(changed, 0);  // the augmentation is redrawn each epoch
}

TEST(LoaderSampleTransform, SameBatchesForAnyNumberOfWorkersDifferentAcrossEpochs) {
  auto ds = rows(23);
  auto pipeline = compose({random_crop(1, 3, 1), random_horizontal_flip(), gaussian_noise(0.1)});
  std::vector<std::vector<std::map<int64_t, std::vector<float>>>> results;
  for (int workers : {0, 2, 3}) {
    DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 4,
                           .sample_transform = pipeline});
    results.push_back(run(loader, 2));
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_NE(results[0][0], results[0][1]);
  // Another batch size regroups the samples but leaves each sample's augmentation alone.
  DataLoader other(ds, {.batch_size = 7, .seed = 4, .sample_transform = pipeline});
  EXPECT_EQ(run(other, 2), results[0]);
  // Another seed draws differently.
  DataLoader reseeded(ds, {.batch_size = 5, .seed = 5, .sample_transform = pipeline});
  EXPECT_NE(run(reseeded, 1)[0], results[0][0]);
}

TEST(LoaderSampleTransform, TransformErrorsNameTheSampleAndBatch) {
  DataLoader loader(rows(6), {.batch_size = 2, .num_workers = 2, .sample_transform = random_crop(2, 9)});
  EXPECT_EQ(message_of([&] { loader.next(); }),
            "DataLoader: sample_transform on sample 0 (batch 0 of epoch 0): random_crop: cannot crop 2x9 from a 1x4 "
            "image padded by 0 (1x4)");
}

}  // namespace
}  // namespace volt::data
