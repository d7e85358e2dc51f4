// The CUDA layer_norm and residual_layer_norm row kernels against the CPU in f64: outputs and the gradients of x,
// the residual, weight and bias. Rows of whole 16-byte packs up to 1024 f32 or 2048 f16/bf16 values, 16-byte
// aligned, take the warp-per-row kernels (kernels/cuda/warp_rows.cuh); the cases below also cover each way a row
// falls back to the block-per-row kernels (a width that is not whole packs, a misaligned view, a row too wide).
// The per-element math is shared with the CPU (kernels/common/norm.h), so every path agrees to rounding. Each case
// skips, saying so, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/gradcheck.h"
#include <volt/kernels/common/norm.h>
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::rand_f64;

namespace {

// The largest |got - want| - (atol + rtol |want|) over the elements, with where it is ("" when within bounds).
std::string worst_excess(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  if (g.size() != w.size()) return "sizes differ: " + std::to_string(g.size()) + " vs " + std::to_string(w.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(e <= worst)) {  // NaN counts
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  if (worst <= 0) return "";
  std::ostringstream os;
  os << "element " << at << ": got " << g[at] << ", want " << w[at] << " (bound " << atol << " + " << rtol << " |want|)";
  return os.str();
}

struct Tol {
  double atol, rtol;
};
// Outputs of size ~1 rounded to the dtype; gradients are sums over a row, a few times larger.
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::f32: return {2e-5, 1e-5};
    case DType::f16: return {4e-3, 2e-3};
    case DType::bf16: return {3e-2, 1e-2};
    default: return {1e-12, 1e-12};  // f64
  }
}

struct Outputs {
  std::vector<Tensor> values;  // y (and s), then the gradients of x (, residual), weight, bias
};

// layer_norm (residual == false) or residual_layer_norm of x (rows, width) viewed from element `offset` of a larger
// buffer, in `dt` on `device` (weight and bias in f32 for half x: the mixed-precision layout), or with reference
// == true in f64 on the CPU, backpropagating a fixed weighting of every output. The inputs are the same
// dtype-rounded values either way.
Outputs run(bool residual, int64_t rows, int64_t width, int64_t offset, DType dt, Device device, bool reference) {
  const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;
  auto input = [&](uint64_t seed, double lo, double hi) {
    const Tensor values = rand_f64({rows * width + offset}, seed, lo, hi).to(dt);  // rounded to the dtype
    const Tensor buf = reference ? values.to(DType::f64) : values.to(device);
    return buf.narrow(0, offset, rows * width).view({rows, width});
  };
  Tensor x = input(21, -2, 3).set_requires_grad();
  Tensor r = input(22, -1, 1).set_requires_grad();
  Tensor gy = input(23, -1, 1), gs = input(24, -1, 1);
  const DType wdt = reference ? DType::f64 : pdt;
  Tensor w = rand_f64({width}, 25, 0.5, 1.5).to(pdt).to(wdt).to(device).set_requires_grad();
  Tensor b = rand_f64({width}, 26).to(pdt).to(wdt).to(device).set_requires_grad();
  Outputs out;
  Tensor loss;
  if (residual) {
    auto [s, y] = residual_layer_norm(x, r, w, b, 1e-5);
    loss = add(sum(mul(y.to(DType::f64), gy.to(DType::f64))), sum(mul(s.to(DType::f64), gs.to(DType::f64))));
    out.values = {y, s};
  } else {
    Tensor y = layer_norm(x, {width}, w, b, 1e-5);
    loss = sum(mul(y.to(DType::f64), gy.to(DType::f64)));
    out.values = {y};
  }
  loss.backward();
  out.values.push_back(x.grad());
  if (residual) out.values.push_back(r.grad());
  out.values.push_back(w.grad());
  out.values.push_back(b.grad());
  for (Tensor& t : out.values) t = t.cpu().to(DType::f64);
  return out;
}

// `dt` on `device` against f64 on the CPU.
void expect_matches_f64(Device device, bool residual, int64_t rows, int64_t width, DType dt, int64_t offset = 0) {
  SCOPED_TRACE((residual ? "residual_layer_norm " : "layer_norm ") + std::to_string(rows) + " x " +
               std::to_string(width) + " " + dtype_name(dt) + " offset " + std::to_string(offset));
  const Outputs want = run(residual, rows, width, offset, dt, kCPU, /*reference=*/true);
  const Outputs got = run(residual, rows, width, offset, dt, device, /*reference=*/false);
  ASSERT_EQ(got.values.size(), want.values.size());
  const Tol t = tol_for(dt);
  const size_t n_out = residual ? 2 : 1;
  for (size_t i = 0; i < got.values.size(); ++i) {
    // The parameter gradients sum over the rows: the bound grows with their count.
    const bool param = i + 2 >= got.values.size();
    const double scale = i < n_out ? 1.0 : param ? std::sqrt(static_cast<double>(rows)) * 4 : 4.0;
    Tensor want_i = want.values[i];
    if (i < n_out && dt != DType::f32) want_i = want_i.to(dt).to(DType::f64);  // the output rounded to its dtype
    EXPECT_EQ(worst_excess(got.values[i], want_i, t.atol * scale, t.rtol * scale), "") << "output " << i;
  }
}

}  // namespace

// welford_of (one lane's share of a row, two passes) gives the state welford_push reaches, and merges like it.
TEST(NormRows, WelfordOfAShareMatchesPushesAndMerges) {
  const std::vector<double> v = rand_f64({24}, 31, -3, 5).to_vector<double>();
  for (int count : {0, 1, 7, 24}) {
    SCOPED_TRACE(count);
    const auto a = normmath::welford_of<24, double>(count, [&](int i) { return v[static_cast<size_t>(i)]; });
    auto p = normmath::welford_init<double>();
    for (int i = 0; i < count; ++i) normmath::welford_push(p, v[static_cast<size_t>(i)]);
    EXPECT_EQ(a.n, p.n);
    EXPECT_NEAR(a.mean, p.mean, 1e-14);
    EXPECT_NEAR(a.m2, p.m2, 1e-12 * (1 + p.m2));
  }
  // Two shares merged equal the whole row.
  auto lo = normmath::welford_of<24, double>(10, [&](int i) { return v[static_cast<size_t>(i)]; });
  const auto hi = normmath::welford_of<24, double>(14, [&](int i) { return v[static_cast<size_t>(i) + 10]; });
  const auto all = normmath::welford_of<24, double>(24, [&](int i) { return v[static_cast<size_t>(i)]; });
  normmath::welford_merge(lo, hi);
  EXPECT_EQ(lo.n, 24.0);
  EXPECT_NEAR(lo.mean, all.mean, 1e-14);
  EXPECT_NEAR(lo.m2, all.m2, 1e-12 * all.m2);
  // A row of one repeated value has no spread, as welford_rstd expects.
  const auto flat = normmath::welford_of<8, float>(8, [](int) { return 0.375f; });  // its sums are exact
  EXPECT_EQ(flat.m2, 0.0f);
  EXPECT_EQ(normmath::welford_rstd(flat, 1e-5f), 1.0f / std::sqrt(1e-5f));
}

// The comparison itself, on the CPU's own kernels in f32 and the half types (every CUDA case below uses it).
TEST(NormRows, CpuKernelsInEachDtypeMatchF64WithinTheBounds) {
  for (bool residual : {false, true})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) expect_matches_f64(kCPU, residual, 40, 768, dt, 1);
}

TEST(NormRowsCuda, TransformerWidthsTakeTheWarpKernelsAndMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  for (bool residual : {false, true}) {
    // GPT-2 124M and 350M widths in f32 (the residual stream under bf16-mixed), and in the half types.
    expect_matches_f64(cuda_device(0), residual, 300, 768, DType::f32);
    expect_matches_f64(cuda_device(0), residual, 64, 1024, DType::f32);
    expect_matches_f64(cuda_device(0), residual, 300, 768, DType::bf16);
    expect_matches_f64(cuda_device(0), residual, 64, 1024, DType::f16);
    expect_matches_f64(cuda_device(0), residual, 16, 2048, DType::bf16);  // the widest half row a warp holds (8 packs per lane)
    // Short rows: lanes without a pack, and 2 and 4 packs per lane.
    expect_matches_f64(cuda_device(0), residual, 500, 40, DType::f32);
    expect_matches_f64(cuda_device(0), residual, 70, 200, DType::f32);
    expect_matches_f64(cuda_device(0), residual, 70, 512, DType::bf16);
  }
}

TEST(NormRowsCuda, RowsThatDoNotQualifyTakeTheBlockKernelsAndMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  for (bool residual : {false, true}) {
    expect_matches_f64(cuda_device(0), residual, 50, 770, DType::f32);        // not whole packs of four
    expect_matches_f64(cuda_device(0), residual, 50, 772, DType::bf16);       // whole f32 packs but not whole bf16 packs
    expect_matches_f64(cuda_device(0), residual, 50, 768, DType::f32, 1);     // a view one element off 16-byte alignment
    expect_matches_f64(cuda_device(0), residual, 20, 1280, DType::f32);       // wider than 8 packs of four per lane
    expect_matches_f64(cuda_device(0), residual, 20, 3000, DType::bf16);      // wider than 8 packs of eight per lane
    expect_matches_f64(cuda_device(0), residual, 30, 768, DType::f64);        // f64 always takes the block kernels
  }
}

// layer_norm without weight and bias: the warp kernels' parameter packs take their fill values (1 and 0), in the
// forward and in the input gradient, f32 and bf16 rows of GPT-2's width.
TEST(NormRowsCuda, WithoutWeightAndBiasMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor values = rand_f64({64, 768}, 31, -2, 3).to(dt), weighting = rand_f64({64, 768}, 32);
    Tensor xg = values.to(cuda_device(0)).set_requires_grad();
    Tensor xc = values.to(DType::f64).set_requires_grad();
    Tensor yg = layer_norm(xg, {768}), yc = layer_norm(xc, {768});
    sum(mul(yg.to(DType::f64), weighting.to(cuda_device(0)))).backward();
    sum(mul(yc, weighting)).backward();
    const Tol t = tol_for(dt);
    EXPECT_EQ(worst_excess(yg.to(kCPU).to(DType::f64), yc.detach(), t.atol, t.rtol), "") << "y";
    EXPECT_EQ(worst_excess(xg.grad().to(kCPU).to(DType::f64), xc.grad(), 4 * t.atol, 4 * t.rtol), "") << "dx";
  }
}
