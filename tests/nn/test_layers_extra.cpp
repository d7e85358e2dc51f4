// conv1d / Conv1d, conv_transpose2d / ConvTranspose2d, interpolate / Upsample, adaptive_avg_pool2d /
// AdaptiveAvgPool2d, ModuleList and ModuleDict: values by hand and against naive f64 loops, gradients against
// finite differences, parameter names, and the errors for bad arguments.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/nn.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {

Tensor leaf(const Shape& s, uint64_t seed) { return rand_f64(s, seed).set_requires_grad(true); }

// y[n, g*cog + o, l] = b + sum_{c, k} x[n, g*cig + c, l*s - p + k*d] w[g*cog + o, c, k]
std::vector<double> conv1d_ref(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p, int64_t d,
                               int64_t groups) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2), OC = w.size(0), K = w.size(2);
  const int64_t cig = C / groups, cog = OC / groups, OL = (L + 2 * p - d * (K - 1) - 1) / s + 1;
  std::vector<double> y(static_cast<size_t>(N * OC * OL), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t l = 0; l < OL; ++l) {
        double acc = bv.empty() ? 0.0 : bv[oc];
        const int64_t g = oc / cog;
        for (int64_t c = 0; c < cig; ++c)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t il = l * s - p + k * d;
            if (il >= 0 && il < L) acc += xv[(n * C + g * cig + c) * L + il] * wv[(oc * cig + c) * K + k];
          }
        y[(n * OC + oc) * OL + l] = acc;
      }
  return y;
}

// The scatter form: every x[n, ic, i, j] adds x * w[ic, o, a, b] at (i*s - p + a*d, j*s - p + b*d) of output
// channel g*cog + o.
std::vector<double> conv_transpose2d_ref(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p,
                                         int64_t op, int64_t groups, int64_t d, Shape& out_shape) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t cog = w.size(1), K = w.size(2), OC = cog * groups, cig = C / groups;
  const int64_t OH = (H - 1) * s - 2 * p + d * (K - 1) + op + 1, OW = (W - 1) * s - 2 * p + d * (K - 1) + op + 1;
  out_shape = {N, OC, OH, OW};
  std::vector<double> y(static_cast<size_t>(N * OC * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ic = 0; ic < C; ++ic)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t o = 0; o < cog; ++o)
            for (int64_t a = 0; a < K; ++a)
              for (int64_t bb = 0; bb < K; ++bb) {
                const int64_t oi = i * s - p + a * d, oj = j * s - p + bb * d, oc = (ic / cig) * cog + o;
                if (oi < 0 || oi >= OH || oj < 0 || oj >= OW) continue;
                y[((n * OC + oc) * OH + oi) * OW + oj] +=
                    xv[((n * C + ic) * H + i) * W + j] * wv[((ic * cog + o) * K + a) * K + bb];
              }
  if (b.defined()) {
    const auto bv = b.to_vector<double>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oc = 0; oc < OC; ++oc)
        for (int64_t k = 0; k < OH * OW; ++k) y[(n * OC + oc) * OH * OW + k] += bv[oc];
  }
  return y;
}

}  // namespace

// ---- conv1d -------------------------------------------------------------------------------------------------

TEST(Conv1d, MatchesNaiveLoopsWithStridePaddingDilationGroups) {
  for (auto [s, p, d, g] : {std::tuple{1, 0, 1, 1}, std::tuple{2, 1, 1, 1}, std::tuple{1, 2, 2, 2},
                            std::tuple{3, 1, 2, 2}}) {
    Tensor x = rand_f64({2, 4, 9}, 1), w = rand_f64({6, 4 / g, 3}, 2), b = rand_f64({6}, 3);
    Tensor y = conv1d(x, w, b, s, p, d, g);
    expect_close(y, conv1d_ref(x, w, b, s, p, d, g), 1e-12, 1e-12);
    expect_close(conv1d(x, w, Tensor(), s, p, d, g), conv1d_ref(x, w, Tensor(), s, p, d, g), 1e-12, 1e-12);
  }
  // By hand: a moving sum of width 2.
  Tensor y = conv1d(from_vector<float>({1, 2, 3, 4}, {1, 1, 4}), from_vector<float>({1, 1}, {1, 1, 2}));
  expect_close(y, {3, 5, 7});
  // Unbatched input.
  Tensor x = rand_f64({4, 9}, 4), w = rand_f64({2, 4, 3}, 5);
  EXPECT_EQ(conv1d(x, w).shape(), (Shape{2, 7}));
  expect_close(conv1d(x, w), conv1d(x.unsqueeze(0), w).to_vector<double>(), 0, 0);
}

TEST(Conv1d, GradientsMatchFiniteDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], 2, 1, 2, 2); },
                         {leaf({2, 4, 8}, 6), leaf({4, 2, 3}, 7), leaf({4}, 8)});
}

TEST(Conv1d, ModuleParametersAndErrors) {
  nn::Conv1d c(4, 6, 3, 1, 1, 1, 2);
  EXPECT_EQ(c.weight.shape(), (Shape{6, 2, 3}));
  EXPECT_EQ(c.bias.shape(), (Shape{6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3.0);
  for (double v : c.weight.to_vector<double>()) EXPECT_LE(std::abs(v), bound);
  Tensor x = randn({2, 4, 5});
  expect_close(c(x), conv1d(x, c.weight, c.bias, 1, 1, 1, 2).to_vector<double>(), 0, 0);
  EXPECT_EQ(c.extra_repr(), "4, 6, kernel_size=3, stride=1, padding=1, groups=2");
  VOLT_EXPECT_ERROR(c(randn({2, 3, 5})), "Conv1d::forward", "(N, 4, L)", "(2, 3, 5)");
  VOLT_EXPECT_ERROR(nn::Conv1d(4, 5, 3, 1, 0, 1, 2), "divisible by groups");
  VOLT_EXPECT_ERROR(conv1d(randn({2, 4, 5}), randn({6, 3, 3})), "conv1d", "weight.size(1) * groups (3)");
  VOLT_EXPECT_ERROR(conv1d(randn({2, 4, 2}), randn({6, 4, 3})), "conv1d", "input length (2", "kernel length (3)");
  VOLT_EXPECT_ERROR(conv1d(randn({2, 4, 5, 1}), randn({6, 4, 3})), "conv1d", "(N, C_in, L)", "(2, 4, 5, 1)");
}

// ---- conv_transpose2d ---------------------------------------------------------------------------------------

TEST(ConvTranspose2d, ByHandStrideTwoReplicatesBlocks) {
  // A 2x2 kernel of ones with stride 2 paints each input value over a 2x2 block.
  Tensor x = from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor y = conv_transpose2d(x, ones({1, 1, 2, 2}), Tensor(), {2, 2});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  expect_close(y, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Stride 1, a 2x2 kernel: overlapping sums, plus the bias.
  Tensor z = conv_transpose2d(x, ones({1, 1, 2, 2}), from_vector<float>({10}));
  expect_close(z, {11, 13, 12, 14, 20, 16, 13, 17, 14});
}

TEST(ConvTranspose2d, MatchesNaiveScatter) {
  struct Case { int64_t s, p, op, g, d; };
  for (Case c : {Case{1, 0, 0, 1, 1}, Case{2, 1, 1, 1, 1}, Case{2, 0, 1, 2, 1}, Case{3, 1, 2, 1, 2},
                 Case{1, 1, 1, 2, 2} /* output_padding >= stride, allowed by the dilation */}) {
    Tensor x = rand_f64({2, 4, 3, 4}, 11), w = rand_f64({4, 3, 3, 3}, 12), b = rand_f64({3 * c.g}, 13);
    Shape shape;
    std::vector<double> ref = conv_transpose2d_ref(x, w, b, c.s, c.p, c.op, c.g, c.d, shape);
    Tensor y = conv_transpose2d(x, w, b, {c.s, c.s}, {c.p, c.p}, {c.op, c.op}, c.g, {c.d, c.d});
    EXPECT_EQ(y.shape(), shape) << "s=" << c.s << " p=" << c.p << " op=" << c.op << " g=" << c.g;
    expect_close(y, ref, 1e-12, 1e-12);
  }
}

TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  // <conv_transpose2d(x, w), z> == <x, conv2d(z, w)> for the same stride/padding/dilation.
  Tensor x = rand_f64({2, 3, 4, 5}, 21), w = rand_f64({3, 2, 3, 3}, 22);
  Tensor y = conv_transpose2d(x, w, Tensor(), {2, 2}, {1, 1}, {0, 0}, 1, {1, 1});
  Tensor z = rand_f64(y.shape(), 23);
  const double lhs = sum(mul(y, z)).item(), rhs = sum(mul(x, conv2d(z, w, Tensor(), {2, 2}, {1, 1}))).item();
  EXPECT_NEAR(lhs, rhs, 1e-10);
}

TEST(ConvTranspose2d, GradientsMatchFiniteDifferences) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 1}, {1, 1}, 2, {1, 1});
      },
      {leaf({2, 4, 3, 3}, 31), leaf({4, 2, 3, 3}, 32), leaf({4}, 33)});
  // output_padding at least the stride (allowed by dilation 2): the padded path.
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2], {1, 1}, {1, 0}, {1, 1}, 1, {2, 2});
      },
      {leaf({1, 2, 3, 4}, 34), leaf({2, 3, 2, 2}, 35), leaf({3}, 36)});
}

TEST(ConvTranspose2d, HalfOnTheCpuRunsInF32) {
  Tensor x = rand_f64({1, 2, 3, 3}, 41), w = rand_f64({2, 2, 3, 3}, 42);
  Tensor y16 = conv_transpose2d(x.to(DType::f16), w.to(DType::f16), Tensor(), {2, 2});
  EXPECT_EQ(y16.dtype(), DType::f16);
  Tensor ref = conv_transpose2d(x.to(DType::f16).to(DType::f64), w.to(DType::f16).to(DType::f64), Tensor(), {2, 2});
  expect_close(y16, ref.to_vector<double>(), 1e-2, 1e-2);
}

TEST(ConvTranspose2d, ModuleAndErrors) {
  nn::ConvTranspose2d m(4, 6, 3, 2, 1, 1, 2);
  EXPECT_EQ(m.weight.shape(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(m.bias.shape(), (Shape{6}));
  const double bound = 1.0 / std::sqrt(3.0 * 9.0);  // fan_in from weight dim 1, as PyTorch
  for (double v : m.bias.to_vector<double>()) EXPECT_LE(std::abs(v), bound);
  Tensor x = randn({2, 4, 5, 5});
  Tensor y = m(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 10, 10}));  // (5-1)*2 - 2 + 2 + 1 + 1
  expect_close(y, conv_transpose2d(x, m.weight, m.bias, {2, 2}, {1, 1}, {1, 1}, 2).to_vector<double>(), 0, 0);
  EXPECT_EQ(m.extra_repr(), "4, 6, kernel_size=3, stride=2, padding=1, output_padding=1, groups=2");
  VOLT_EXPECT_ERROR(nn::ConvTranspose2d(4, 6, 3, 2, 0, 2), "output_padding (2)", "stride (2)");
  VOLT_EXPECT_ERROR(conv_transpose2d(randn({1, 3, 4, 4}), randn({4, 2, 3, 3})), "conv_transpose2d",
                    "x.size(1) (3)", "weight.size(0) (4)");
  VOLT_EXPECT_ERROR(conv_transpose2d(randn({1, 4, 4, 4}), randn({4, 2, 3, 3}), Tensor(), {2, 2}, {0, 0}, {2, 0}),
                    "conv_transpose2d", "output_padding (2, 0)");
  VOLT_EXPECT_ERROR(conv_transpose2d(randn({1, 4, 4, 4}), randn({4, 2, 3, 3}), randn({3})), "conv_transpose2d",
                    "bias has shape (3,)", "expected (2,)");
  VOLT_EXPECT_ERROR(conv_transpose2d(randn({1, 4, 1, 1}), randn({4, 2, 1, 1}), Tensor(), {1, 1}, {1, 1}),
                    "conv_transpose2d", "output height of -1");
  VOLT_EXPECT_ERROR(conv_transpose2d(randn({1, 4, 4, 4}), randn({4, 2, 3, 3}, DType::f64)), "conv_transpose2d",
                    "weight has dtype float64");
}

// ---- interpolate / Upsample ---------------------------------------------------------------------------------

TEST(Interpolate, NearestByHand) {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  expect_close(interpolate(x, {.scale_factor = {2.0}}), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0, 0);
  // Height 2 -> 3 (scale 2/3: rows 0, 0, 1), width 2 -> 1 (scale 2: column 0).
  expect_close(interpolate(x, {.size = {3, 1}}), {1, 1, 3}, 0, 0);
  // 5 -> 7 columns by scale_factor 1.5: source floor(o / 1.5) = 0 0 1 2 2 3 4.
  Tensor r = from_vector<float>({0, 1, 2, 3, 4}, {1, 1, 1, 5});
  expect_close(interpolate(r, {.scale_factor = {1.0, 1.5}}), {0, 0, 1, 2, 2, 3, 4}, 0, 0);
}

TEST(Interpolate, BilinearByHand) {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  // PyTorch's F.interpolate(x, scale_factor=2, mode="bilinear") (align_corners=False).
  expect_close(interpolate(x, {.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear}),
               {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0});
  // align_corners=True: out[i][j] = 1 + 2i/3 + j/3.
  std::vector<double> ac;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) ac.push_back(1 + 2.0 * i / 3 + j / 3.0);
  expect_close(interpolate(x, {.size = {4}, .mode = InterpolateMode::Bilinear, .align_corners = true}), ac);
  // Downsampling 4 -> 2 without align_corners reads the centres between pixel pairs: the pair means.
  Tensor r = from_vector<double>({0, 1, 2, 3}, {1, 1, 1, 4});
  expect_close(interpolate(r, {.size = {1, 2}, .mode = InterpolateMode::Bilinear}), {0.5, 2.5}, 1e-12);
}

TEST(Interpolate, BilinearScaleFactorUsesItsInverse) {
  // With a scale factor the source coordinate is (dst + 0.5) / scale_factor - 0.5, not (dst + 0.5) * in/out - 0.5.
  Tensor r = from_vector<double>({0, 10, 20, 30, 40}, {1, 1, 1, 5});
  Tensor y = interpolate(r, {.scale_factor = {1.0, 1.5}, .mode = InterpolateMode::Bilinear});
  std::vector<double> ref;
  for (int o = 0; o < 7; ++o) {
    double src = std::max((o + 0.5) / 1.5 - 0.5, 0.0);
    const int i0 = static_cast<int>(src), i1 = std::min(i0 + 1, 4);
    ref.push_back(10 * i0 + (src - i0) * 10 * (i1 - i0));
  }
  expect_close(y, ref, 1e-12);
  Tensor by_size = interpolate(r, {.size = {1, 7}, .mode = InterpolateMode::Bilinear});
  EXPECT_GT(std::abs(by_size.to_vector<double>()[5] - ref[5]), 0.1);  // in/out = 5/7 differs from 1/1.5
}

TEST(Interpolate, GradientsMatchFiniteDifferences) {
  for (InterpolateOptions o :
       {InterpolateOptions{.scale_factor = {2.0, 1.5}}, InterpolateOptions{.size = {5, 3}},
        InterpolateOptions{.scale_factor = {1.7}, .mode = InterpolateMode::Bilinear},
        InterpolateOptions{.size = {2, 5}, .mode = InterpolateMode::Bilinear, .align_corners = true}})
    expect_gradients_match([o](const std::vector<Tensor>& in) { return interpolate(in[0], o); },
                           {leaf({2, 2, 3, 4}, 51)});
}

TEST(Interpolate, UpsampleModuleAndErrors) {
  nn::Upsample up({.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear, .align_corners = false});
  Tensor x = randn({1, 2, 3, 3});
  expect_close(up(x), interpolate(x, up.options).to_vector<double>(), 0, 0);
  EXPECT_EQ(up.extra_repr(), "scale_factor=2, mode='bilinear', align_corners=False");
  EXPECT_EQ(nn::Upsample({.size = {4, 6}}).extra_repr(), "size=(4, 6), mode='nearest'");
  EXPECT_EQ(parse_interpolate_mode("bilinear"), InterpolateMode::Bilinear);
  VOLT_EXPECT_ERROR(parse_interpolate_mode("bicubic"), "\"nearest\" or \"bilinear\"", "\"bicubic\"");
  VOLT_EXPECT_ERROR(nn::Upsample({}), "exactly one of size and scale_factor", "neither");
  VOLT_EXPECT_ERROR(nn::Upsample({.scale_factor = {2.0}, .align_corners = true}), "align_corners", "bilinear");
  VOLT_EXPECT_ERROR(interpolate(x, {.size = {2}, .scale_factor = {2.0}}), "interpolate", "both");
  VOLT_EXPECT_ERROR(interpolate(randn({2, 3, 4}), {.size = {2}}), "interpolate", "(N, C, H, W)", "(2, 3, 4)");
  VOLT_EXPECT_ERROR(interpolate(x, {.scale_factor = {0.2}}), "interpolate", "empty output");
  VOLT_EXPECT_ERROR(interpolate(x, {.size = {1, 2, 3}}), "interpolate", "one value", "or two");
}

// ---- adaptive_avg_pool2d ------------------------------------------------------------------------------------

TEST(AdaptiveAvgPool2d, PyTorchBins) {
  // 5 -> 3 bins: [0, 2), [1, 4), [3, 5) (overlapping).
  Tensor r = from_vector<float>({1, 2, 3, 4, 5}, {1, 1, 1, 5});
  expect_close(adaptive_avg_pool2d(r, {1, 3}), {1.5, 3.0, 4.5});
  // Against naive loops, 7x5 -> 3x4, and (C, H, W) input.
  Tensor x = rand_f64({2, 3, 7, 5}, 61);
  const auto xv = x.to_vector<double>();
  std::vector<double> ref;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t h0 = i * 7 / 3, h1 = ((i + 1) * 7 + 2) / 3, w0 = j * 5 / 4, w1 = ((j + 1) * 5 + 3) / 4;
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += xv[static_cast<size_t>((nc * 7 + h) * 5 + w)];
        ref.push_back(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  expect_close(adaptive_avg_pool2d(x, {3, 4}), ref, 1e-12, 1e-12);
  EXPECT_EQ(adaptive_avg_pool2d(x.select(0, 0), {3, 4}).shape(), (Shape{3, 3, 4}));
  // Global pooling is the mean; an output larger than the input repeats values.
  expect_close(adaptive_avg_pool2d(x, 1), mean(x, {2, 3}, true).to_vector<double>(), 1e-12, 1e-12);
  expect_close(adaptive_avg_pool2d(from_vector<float>({1, 2}, {1, 1, 1, 2}), {1, 4}), {1, 1, 2, 2});
}

TEST(AdaptiveAvgPool2d, GradientsModuleAndErrors) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {3, 2}); },
                         {leaf({2, 2, 5, 7}, 62)});
  nn::AdaptiveAvgPool2d pool(std::pair<int64_t, int64_t>{2, 3});
  Tensor x = randn({1, 2, 6, 6});
  expect_close(pool(x), adaptive_avg_pool2d(x, {2, 3}).to_vector<double>(), 0, 0);
  EXPECT_EQ(pool.extra_repr(), "output_size=(2, 3)");
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1).extra_repr(), "output_size=1");
  VOLT_EXPECT_ERROR(nn::AdaptiveAvgPool2d(0), "AdaptiveAvgPool2d", "must be positive");
  VOLT_EXPECT_ERROR(adaptive_avg_pool2d(randn({4, 4}), 2), "adaptive_avg_pool2d", "(N, C, H, W)", "(4, 4)");
  VOLT_EXPECT_ERROR(adaptive_avg_pool2d(ones({1, 1, 2, 2}, DType::i64), 1), "adaptive_avg_pool2d", "int64");
}

// ---- ModuleList / ModuleDict --------------------------------------------------------------------------------

TEST(Containers, ModuleListNamesIndexingAndErrors) {
  nn::ModuleList list{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>()};
  list.push_back(std::make_shared<nn::Linear>(4, 2));
  EXPECT_EQ(list.size(), 3u);
  std::vector<std::string> names;
  for (const auto& [n, t] : list.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(list.at<nn::Linear>(2).out_features, 2);
  Tensor x = randn({5, 3});
  Tensor y = x;
  for (const auto& m : list) y = dynamic_cast<nn::UnaryModule&>(*m)(y);
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
  EXPECT_EQ(list[1].type_name(), "ReLU");
  VOLT_EXPECT_ERROR(list[3], "ModuleList", "index 3", "3 modules");
  VOLT_EXPECT_ERROR(list.at<nn::Linear>(1), "ModuleList[1] is a ReLU");
}

TEST(Containers, ModuleDictKeysOrderAndErrors) {
  nn::ModuleDict dict{{"encoder", std::make_shared<nn::Linear>(3, 4)}};
  dict.insert("head", std::make_shared<nn::Linear>(4, 1));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"encoder", "head"}));
  EXPECT_TRUE(dict.contains("head"));
  EXPECT_FALSE(dict.contains("decoder"));
  std::vector<std::string> names;
  for (const auto& [n, t] : dict.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"encoder.weight", "encoder.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(dict.at<nn::Linear>("head").in_features, 4);
  VOLT_EXPECT_ERROR(dict["decoder"], "no key \"decoder\"", "\"encoder\", \"head\"");
  VOLT_EXPECT_ERROR(dict.insert("head", std::make_shared<nn::ReLU>()), "head");
  VOLT_EXPECT_ERROR(dict.insert("a.b", std::make_shared<nn::ReLU>()), "a.b");
}

// ---- autocast ------------------------------------------------------------------------------------------------

TEST(LayerOpsAutocast, ConvolutionsLowerResamplingKeepsTheDtype) {
  Tensor x = randn({1, 2, 4, 4}), w = randn({2, 3, 3, 3}), b = randn({3});
  AutocastGuard on(true, DType::bf16);
  EXPECT_EQ(conv_transpose2d(x, w, b).dtype(), DType::bf16);
  EXPECT_EQ(conv1d(randn({1, 2, 5}), randn({3, 2, 2}), randn({3})).dtype(), DType::bf16);
  EXPECT_EQ(adaptive_avg_pool2d(x, 2).dtype(), DType::f32);
  EXPECT_EQ(interpolate(x, {.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear}).dtype(), DType::f32);
}
