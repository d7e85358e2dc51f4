// conv2d, pooling and batch norm: forward against naive loops, gradients against finite differences (f64),
// running-statistic updates, error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::rand_f64;

struct Geo {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Geo& g, Shape& out_shape) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(w.size(0), 0.0);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), KH = w.size(2),
                KW = w.size(3);
  const int64_t OH = (H + 2 * g.ph - g.dh * (KH - 1) - 1) / g.sh + 1, OW = (W + 2 * g.pw - g.dw * (KW - 1) - 1) / g.sw + 1;
  out_shape = {N, O, OH, OW};
  std::vector<double> out(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = bv[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += xv[((n * C + c) * H + ih) * W + iw] * wv[((o * C + c) * KH + i) * KW + j];
              }
          out[((n * O + o) * OH + oh) * OW + ow] = s;
        }
  return out;
}

// Max (is_max) or average-with-padding-counted pooling.
std::vector<double> ref_pool(const Tensor& x, int64_t k, int64_t s, int64_t p, bool is_max) {
  std::vector<double> xv = x.to_vector<double>();
  const int64_t P = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  std::vector<double> out;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            int64_t ih = oh * s - p + i, iw = ow * s - p + j;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double v = xv[(pl * H + ih) * W + iw];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        out.push_back(is_max ? acc : acc / static_cast<double>(k * k));
      }
  return out;
}

Tensor randf(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return rand(s, DType::f32, kCPU, &g, -1.0, 1.0);
}

TEST(Conv2d, MatchesNaiveForStridePaddingDilation) {
  Tensor x = randf({2, 3, 9, 8}, 1), w = randf({4, 3, 3, 2}, 2), b = randf({4}, 3);
  for (Geo g : {Geo{}, Geo{2, 1, 1, 0, 1, 1}, Geo{1, 2, 2, 1, 2, 3}, Geo{3, 3, 1, 1, 2, 1}}) {
    Shape s;
    std::vector<double> ref = ref_conv(x, w, b, g, s);
    Tensor y = conv2d(x, w, b, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
    EXPECT_EQ(y.shape(), s);
    expect_close(y, ref, 1e-5);
  }
  Shape s;
  std::vector<double> ref = ref_conv(x, w, Tensor(), Geo{}, s);
  expect_close(conv2d(x, w), ref, 1e-5);
}

TEST(Conv2d, NonContiguousInputMatchesNaive) {
  Tensor xp = randf({2, 8, 9, 3}, 4);
  Tensor x = xp.permute({0, 3, 1, 2});  // NHWC storage viewed as NCHW
  Tensor w = randf({2, 3, 3, 3}, 5);
  Shape s;
  expect_close(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), ref_conv(x.contiguous(), w, Tensor(), Geo{1, 1, 1, 1, 1, 1}, s),
               1e-5);
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  Tensor x = rand_f64({2, 2, 5, 6}, 11).set_requires_grad(), w = rand_f64({3, 2, 3, 2}, 12).set_requires_grad();
  Tensor b = rand_f64({3}, 13).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2}); }, {x, w, b});
  // Non-contiguous x, no bias.
  Tensor xt = rand_f64({2, 6, 5, 2}, 14).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return conv2d(in[0].permute({0, 3, 2, 1}), in[1], Tensor(), {1, 1}, {0, 1}); },
      {xt, w});
}

TEST(Pool2d, MaxAndAvgMatchNaive) {
  Tensor x = randf({2, 3, 7, 7}, 21);
  for (auto [k, s, p] : {std::tuple<int64_t, int64_t, int64_t>{2, 2, 0}, {3, 2, 1}, {3, 1, 1}}) {
    Tensor m = max_pool2d(x, {k, k}, {s, s}, {p, p});
    expect_close(m, ref_pool(x, k, s, p, true), 1e-6);
    Tensor a = avg_pool2d(x, {k, k}, {s, s}, {p, p});
    expect_close(a, ref_pool(x, k, s, p, false), 1e-6);
  }
  // stride {0,0} means stride = kernel; known values with padding counted in the average.
  Tensor t = from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  expect_close(max_pool2d(t, {2, 2}), {4});
  expect_close(avg_pool2d(t, {2, 2}, {1, 1}, {1, 1}), {0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0});
  EXPECT_EQ(max_pool2d(randf({3, 4, 4}, 22), {2, 2}).shape(), (Shape{3, 2, 2}));  // unbatched (C, H, W)
}

TEST(Pool2d, GradientsMatchFiniteDifferences) {
  Tensor x = rand_f64({2, 2, 6, 5}, 31).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}); }, {x});
  Tensor xt = rand_f64({2, 5, 6, 2}, 32).set_requires_grad();  // overlapping windows on a non-contiguous input
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return max_pool2d(in[0].permute({0, 3, 2, 1}), {2, 2}, {1, 1}); }, {xt});
}

TEST(BatchNorm, TrainingNormalisesAndUpdatesRunningStats) {
  // x (N=4, C=2): channel 0 = 1,2,3,4; channel 1 = 10,10,20,20.
  Tensor x = from_vector<float>({1, 10, 2, 10, 3, 20, 4, 20}, {4, 2});
  Tensor w = from_vector<float>({2, 1}), b = from_vector<float>({0.5, -1});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 0.0);
  const double s0 = std::sqrt(1.25);  // biased var of 1..4
  expect_close(y, {2 * (-1.5 / s0) + 0.5, -2, 2 * (-0.5 / s0) + 0.5, -2, 2 * (0.5 / s0) + 0.5, 0, 2 * (1.5 / s0) + 0.5, 0},
               1e-5);
  // running = 0.9 * old + 0.1 * stat, with the unbiased variance (5/3 and 100/3).
  expect_close(rm, {0.25, 1.5}, 1e-6);
  expect_close(rv, {0.9 + 0.1 * 5.0 / 3.0, 0.9 + 0.1 * 100.0 / 3.0}, 1e-5);
}

TEST(BatchNorm, FourDTrainAndEvalMatchReference) {
  Tensor x = randf({3, 2, 4, 5}, 41);
  Tensor w = from_vector<float>({1.5, -0.5}), b = from_vector<float>({0.1, 0.2});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, w, b, rm, rv, true, 0.2, 1e-5);
  std::vector<double> xv = x.to_vector<double>(), ref(xv.size());
  std::vector<double> wv = {1.5, -0.5}, bv = {0.1, 0.2};
  std::vector<double> means(2), uvars(2);
  for (int c = 0; c < 2; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 20; ++i) s += xv[(n * 2 + c) * 20 + i];
    double mean = s / 60;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 20; ++i) ss += std::pow(xv[(n * 2 + c) * 20 + i] - mean, 2);
    means[c] = mean;
    uvars[c] = ss / 59;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 20; ++i) {
        int j = (n * 2 + c) * 20 + i;
        ref[j] = (xv[j] - mean) / std::sqrt(ss / 60 + 1e-5) * wv[c] + bv[c];
      }
  }
  expect_close(y, ref, 1e-5);
  expect_close(rm, {0.2 * means[0], 0.2 * means[1]}, 1e-6);
  expect_close(rv, {0.8 + 0.2 * uvars[0], 0.8 + 0.2 * uvars[1]}, 1e-5);
  // Eval uses the running statistics and leaves them untouched.
  Tensor ye = batch_norm(x, w, b, rm, rv, false, 0.2, 1e-5);
  std::vector<double> rmv = rm.to_vector<double>(), rvv = rv.to_vector<double>();
  for (size_t j = 0; j < xv.size(); ++j) {
    int c = static_cast<int>((j / 20) % 2);
    ref[j] = (xv[j] - rmv[c]) / std::sqrt(rvv[c] + 1e-5) * wv[c] + bv[c];
  }
  expect_close(ye, ref, 1e-5);
  expect_close(rm, rmv, 0);
  // No affine parameters: plain normalisation.
  Tensor yn = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  EXPECT_NEAR(mean(yn.select(1, 0)).item(), 0.0, 1e-5);
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  Tensor x = rand_f64({4, 3}, 51).set_requires_grad(), w = rand_f64({3}, 52, 0.5, 1.5).set_requires_grad();
  Tensor b = rand_f64({3}, 53).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true); },
      {x, w, b}, 1e-6, 1e-5, 1e-4);
  Tensor x4 = rand_f64({2, 3, 2, 3}, 54).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true); },
      {x4, w, b}, 1e-6, 1e-5, 1e-4);
  // Non-contiguous x (channels-last storage).
  Tensor xt = rand_f64({2, 2, 3, 3}, 55).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return batch_norm(in[0].permute({0, 3, 1, 2}), in[1], in[2], Tensor(), Tensor(), true);
      },
      {xt, w, b}, 1e-6, 1e-5, 1e-4);
  Tensor rm = rand_f64({3}, 56), rv = rand_f64({3}, 57, 0.5, 2.0);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], rm, rv, false); }, {x4, w, b});
}

TEST(ConvErrors, NameOpArgumentAndExpectation) {
  VOLT_EXPECT_ERROR(conv2d(zeros({1, 3, 5, 5}), zeros({2, 4, 3, 3})), "conv2d", "(1, 3, 5, 5)", "(2, 4, 3, 3)",
                    "weight.size(1)");
  VOLT_EXPECT_ERROR(conv2d(zeros({3, 5, 5}), zeros({2, 3, 3, 3})), "conv2d", "(N, C, H, W)");
  VOLT_EXPECT_ERROR(conv2d(zeros({1, 3, 2, 2}), zeros({2, 3, 3, 3})), "conv2d", "kernel");
  VOLT_EXPECT_ERROR(conv2d(zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3}, DType::f64)), "conv2d", "weight", "float64");
  VOLT_EXPECT_ERROR(conv2d(zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3}), zeros({3})), "conv2d", "bias", "(2,)");
  VOLT_EXPECT_ERROR(max_pool2d(zeros({1, 1, 4, 4}), {2, 2}, {2, 2}, {2, 2}), "max_pool2d", "padding");
  VOLT_EXPECT_ERROR(avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}), "avg_pool2d", "kernel");
  VOLT_EXPECT_ERROR(batch_norm(zeros({4, 3}), zeros({2}), zeros({3}), Tensor(), Tensor(), true), "batch_norm",
                    "weight", "(2,)", "(3,)");
  VOLT_EXPECT_ERROR(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true), "batch_norm",
                    "more than 1 value");
  VOLT_EXPECT_ERROR(batch_norm(zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false), "batch_norm",
                    "running_mean");
}

// An empty batch (a last partial batch of 0, a filtered-out shard) convolves to an empty output, and its weight
// and bias gradients are empty sums: zero. On a GPU it never reaches cuDNN, whose descriptors reject zero sizes.
TEST(Conv2d, EmptyBatchGivesEmptyOutputAndZeroGradients) {
  std::vector<Device> devices{kCPU};
  if (cuda_available()) devices.push_back(cuda_device(0));
  for (Device d : devices) {
    Tensor x = zeros({0, 3, 6, 5}, DType::f32, d).set_requires_grad();
    Tensor w = randf({4, 3, 3, 3}, 81).to(d).set_requires_grad();
    Tensor b = randf({4}, 82).to(d).set_requires_grad();
    Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
    EXPECT_EQ(y.shape(), (Shape{0, 4, 6, 5})) << d.str();
    sum(y).backward();
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_EQ(w.grad().cpu().to_vector<float>(), std::vector<float>(w.numel(), 0.0f)) << d.str();
    EXPECT_EQ(b.grad().cpu().to_vector<float>(), std::vector<float>(4, 0.0f)) << d.str();
  }
}

// The CUDA path (cuDNN) against the CPU path, forward and backward; runs only where a GPU is present.
TEST(ConvCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  Device gpu = cuda_device(0);
  auto check = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in) {
    std::vector<Tensor> gin;
    for (auto& t : in) {
      t = t.detach().set_requires_grad();
      gin.push_back(t.detach().to(gpu).set_requires_grad());
    }
    Tensor yc = f(in), yg = f(gin);
    expect_close(yg.cpu(), yc.to_vector<double>(), 1e-4);
    sum(mul(yc, yc)).backward();
    sum(mul(yg, yg)).backward();
    for (size_t i = 0; i < in.size(); ++i) expect_close(gin[i].grad().cpu(), in[i].grad().to_vector<double>(), 1e-3);
  };
  Tensor x = randf({2, 3, 9, 8}, 71), w = randf({4, 3, 3, 2}, 72), b = randf({4}, 73);
  check([](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {2, 1}, {1, 1}, {1, 2}); }, {x, w, b});
  check([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  check([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {2, 2}, {1, 1}, {1, 1}); }, {x});
  Tensor bw = randf({3}, 74), bb = randf({3}, 75);
  check([](const std::vector<Tensor>& t) { return batch_norm(t[0], t[1], t[2], Tensor(), Tensor(), true); },
        {x, bw, bb});
  Tensor rm = zeros({3}), rv = ones({3}), rmg = rm.to(gpu), rvg = rv.to(gpu);
  batch_norm(x, bw, bb, rm, rv, true, 0.1);
  batch_norm(x.to(gpu), bw.to(gpu), bb.to(gpu), rmg, rvg, true, 0.1);
  expect_close(rmg.cpu(), rm.to_vector<double>(), 1e-5);
  expect_close(rvg.cpu(), rv.to_vector<double>(), 1e-5);
  expect_close(batch_norm(x.to(gpu), bw.to(gpu), bb.to(gpu), rmg, rvg, false).cpu(),
               batch_norm(x, bw, bb, rm, rv, false).to_vector<double>(), 1e-4);
}

}  // namespace
}  // namespace volt
