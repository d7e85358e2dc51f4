// The CPU convolution's internal paths (kernels/cpu/conv.cpp) against naive loops in double, forward and both
// gradients: samples batched into one GEMM (with a partial last chunk), one sample per GEMM (output of at
// least 1024 positions), 1x1 stride-1 convolutions read without im2col (one sample and batched), and the
// tap-table im2col of narrow outputs, with padding, stride and dilation; f64 and f32.
#include <gtest/gtest.h>

#include <vector>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>

namespace volt {
namespace {

using testing::expect_close;

struct Geo {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

struct Ref {
  std::vector<double> out, gx, gw;
};

// y = conv(x, w) + b and, for L = sum(y * gy), dL/dx and dL/dw, by direct summation.
Ref naive(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy, const Geo& g) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = gy.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), KH = w.size(2),
                KW = w.size(3), OH = gy.size(2), OW = gy.size(3);
  Ref r{std::vector<double>(static_cast<size_t>(N * O * OH * OW)), std::vector<double>(xv.size()),
        std::vector<double>(wv.size())};
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t oi = ((n * O + o) * OH + oh) * OW + ow;
          double s = bv[static_cast<size_t>(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const size_t xi = static_cast<size_t>(((n * C + c) * H + ih) * W + iw);
                const size_t wi = static_cast<size_t>(((o * C + c) * KH + i) * KW + j);
                s += xv[xi] * wv[wi];
                r.gx[xi] += gv[static_cast<size_t>(oi)] * wv[wi];
                r.gw[wi] += gv[static_cast<size_t>(oi)] * xv[xi];
              }
          r.out[static_cast<size_t>(oi)] = s;
        }
  return r;
}

void check(const Shape& xs, const Shape& ws, bool bias, const Geo& g, DType dt, double tol) {
  SCOPED_TRACE(::testing::Message() << "x " << shape_to_string(xs) << " w " << shape_to_string(ws) << " stride "
                                    << g.sh << "," << g.sw << " pad " << g.ph << "," << g.pw << " dil " << g.dh << ","
                                    << g.dw << " " << dtype_name(dt));
  Generator gen(7);
  Tensor x = rand(xs, dt, kCPU, &gen, -1.0, 1.0).set_requires_grad();
  Tensor w = rand(ws, dt, kCPU, &gen, -1.0, 1.0).set_requires_grad();
  Tensor b = bias ? rand({ws[0]}, dt, kCPU, &gen, -1.0, 1.0) : Tensor();
  Tensor y = conv2d(x, w, b, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
  Tensor gy = rand(y.shape(), dt, kCPU, &gen, -1.0, 1.0);
  (y * gy).sum().backward();
  const Ref r = naive(x.detach(), w.detach(), b, gy, g);
  expect_close(y, r.out, tol);
  expect_close(x.grad(), r.gx, tol);
  expect_close(w.grad(), r.gw, tol * 10);  // sums over the whole batch
}

TEST(Conv2dCpuPaths, MatchNaiveLoops) {
  for (auto [dt, tol] : {std::pair<DType, double>{DType::f64, 1e-10}, {DType::f32, 2e-4}}) {
    // 3x3 with padding, 33x33 output (>= 1024 positions): one sample per GEMM.
    check({2, 3, 33, 33}, {4, 3, 3, 3}, true, Geo{1, 1, 1, 1, 1, 1}, dt, tol);
    // 10x10 output: 11 samples per GEMM, N = 13 leaves a chunk of 2.
    check({13, 3, 10, 10}, {5, 3, 3, 3}, true, Geo{1, 1, 1, 1, 1, 1}, dt, tol);
    // 1x1 stride 1: read in place (1024 positions) and gathered (25 positions, 3 samples per chunk).
    check({2, 6, 32, 32}, {4, 6, 1, 1}, false, Geo{}, dt, tol);
    check({3, 6, 5, 5}, {4, 6, 1, 1}, true, Geo{}, dt, tol);
    // 1x1 stride 2 (a shortcut convolution) and narrow outputs through the tap table: stride, padding,
    // dilation, rectangular kernels, outputs narrower than wide.
    check({4, 6, 8, 8}, {8, 6, 1, 1}, false, Geo{2, 2, 0, 0, 1, 1}, dt, tol);
    check({3, 4, 9, 8}, {5, 4, 3, 2}, true, Geo{2, 1, 1, 0, 1, 2}, dt, tol);
    check({2, 2, 7, 11}, {3, 2, 2, 3}, false, Geo{1, 2, 2, 1, 2, 3}, dt, tol);
    // Wide rows (>= 16) with stride 2 and padding through the row copies.
    check({2, 3, 40, 37}, {4, 3, 3, 3}, true, Geo{2, 2, 1, 1, 1, 1}, dt, tol);
    check({2, 3, 20, 40}, {4, 3, 3, 5}, false, Geo{1, 1, 2, 3, 1, 2}, dt, tol);
  }
}

}  // namespace
}  // namespace volt
