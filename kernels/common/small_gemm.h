#pragma once
// Volt's own f32 GEMM for products whose output is small (kernels/cuda/small_gemm.cu). cuBLAS picks kernels
// with large tiles, so a 256 x 128 output makes a handful of CTAs, and a 10 x 128 weight gradient over 256 rows
// became a 264-way split-K kernel of 63 us on an H200: the 784-128-10 MLP's step at batch 256 was bound by
// such GEMMs. Here a block owns a kTile x kTile output tile and one slice of k, and the GPU is filled by cutting k
// into `splits` slices; each slice's sums go to a partial buffer and one more kernel adds the slices in order.
// No atomics: the result is deterministic for a given GPU model (the cut depends on its multiprocessor count,
// so an H100 PCIe and an H100 SXM may differ in the last bits), and it is the same bit for bit as reference()
// below computes on the host with the same cut, which is how the CPU tests check the arithmetic and the GPU
// tests check the kernel.
//
// The arithmetic of output (i, j), fixed by this header:
//   partial_s = fma chain over kk in [k_begin(s), k_end(s)) ascending: acc = fmaf(op(A)[i][kk], op(B)[kk][j], acc)
//               starting from acc = +0
//   sum       = ((partial_0 + partial_1) + partial_2) + ...
//   GEMM:     C[i][j] = beta == 0 ? alpha * sum : fmaf(alpha, sum, beta * C[i][j])
//   linear:   z = sum + bias[j] (no bias: z = sum); pre[i][j] = z; C[i][j] = act(z)
// Every product that is followed by an addition is an explicit fmaf, so neither compiler can contract it
// differently (as kernels/common/philox.h).
#include <cmath>
#include <cstdint>
#include <vector>

#include <volt/kernels/activation.h>
#include <volt/kernels/common/bias_act.h>
#include <volt/kernels/common/macros.h>

namespace volt::small_gemm {

constexpr int kTile = 32;                        // a block's output tile is kTile x kTile
constexpr int kSlab = 32;                        // k per shared-memory stage; slices are whole slabs
constexpr int kThreadsX = 16, kThreadsY = 16;    // 256 threads; thread (x, y) owns rows y, y + 16, cols x, x + 16
constexpr int kMaxSplits = 64;
constexpr int kBlocksPerSm = 2;                  // the split aims at this many blocks per multiprocessor
constexpr int64_t kMaxOutput = int64_t{1} << 18;  // m * n (256 tiles): larger outputs fill the GPU with cuBLAS's tiles
constexpr int64_t kMaxWork = int64_t{1} << 25;   // m * n * k: beyond it cuBLAS's large tiles fill the GPU anyway
constexpr int64_t kMaxK = 16384;                 // a longer k leaves slices too long for one block's chain

static_assert(kTile == 2 * kThreadsX && kTile == 2 * kThreadsY, "each thread owns a 2 x 2 micro-tile");

// How a product (m, n, k) is cut: tiles_m x tiles_n output tiles, k in `splits` slices of k_per_split (the last
// one may be shorter, none is empty). Grid: (tiles_m * tiles_n, 1, splits).
struct Plan {
  int64_t tiles_m = 0, tiles_n = 0;
  int64_t splits = 1;
  int64_t k_per_split = 0;  // a multiple of kSlab
  VOLT_HD int64_t k_begin(int64_t s) const { return s * k_per_split; }
  VOLT_HD int64_t k_end(int64_t s, int64_t k) const { return (s + 1) * k_per_split < k ? (s + 1) * k_per_split : k; }
};

// Whether Volt's kernel takes the product: one matrix (no batch), every extent positive, an output of at most
// kMaxOutput elements, at most kMaxWork multiply-adds and k at most kMaxK. (Its 32 x 32 tiles and 2 x 2 thread
// tiles are no match for cuBLAS once the output alone fills the GPU.)
inline bool suits(int64_t m, int64_t n, int64_t k, int64_t batch) {
  if (batch != 1 || m <= 0 || n <= 0 || k <= 0 || k > kMaxK) return false;
  if (m > kMaxOutput || n > kMaxOutput || m * n > kMaxOutput) return false;  // m * n * k below cannot overflow
  return m * n * k <= kMaxWork;
}

// The cut for a GPU with `multiprocessors` SMs: enough k slices that the blocks number about kBlocksPerSm per SM,
// at most kMaxSplits slices and never less than one slab per slice.
inline Plan plan(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  Plan p;
  p.tiles_m = (m + kTile - 1) / kTile;
  p.tiles_n = (n + kTile - 1) / kTile;
  const int64_t tiles = p.tiles_m * p.tiles_n;
  const int64_t slabs = (k + kSlab - 1) / kSlab;
  const int64_t target = int64_t{kBlocksPerSm} * (multiprocessors > 0 ? multiprocessors : 1);
  int64_t splits = (target + tiles - 1) / tiles;
  if (splits > kMaxSplits) splits = kMaxSplits;
  if (splits > slabs) splits = slabs;
  if (splits < 1) splits = 1;
  p.k_per_split = (slabs + splits - 1) / splits * kSlab;
  p.splits = (k + p.k_per_split - 1) / p.k_per_split;  // rounding the slices up to whole slabs may leave fewer
  return p;
}

// One product's operands and output, as in GemmDesc (kernels/backend/linalg.h): row-major, leading dimensions,
// op(X) = X or X^T. For the linear form, bias (n) may be null, pre (m, n; leading dimension n) may be null.
struct Args {
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;  // GEMM form
  const float* bias = nullptr;      // linear form
  float* pre = nullptr;
};

// op(A)[i][kk] and op(B)[kk][j].
VOLT_HD float a_at(const Args& g, int64_t i, int64_t kk) {
  return g.trans_a ? g.a[kk * g.lda + i] : g.a[i * g.lda + kk];
}
VOLT_HD float b_at(const Args& g, int64_t kk, int64_t j) {
  return g.trans_b ? g.b[j * g.ldb + kk] : g.b[kk * g.ldb + j];
}

// The partial sums of element idx (partials laid out [slice][stride]) added in slice order. Also the bias
// gradient's fold of its row runs (kernels/cuda/linear_act.cu), in its accumulation type.
template <class A>
VOLT_HD A fold(const A* partials, int64_t splits, int64_t stride, int64_t idx) {
  A s = partials[idx];
  for (int64_t q = 1; q < splits; ++q) s += partials[q * stride + idx];
  return s;
}

// Writes output (i, j) from its full sum: the GEMM form (alpha, beta) or, when kLinear, bias + activation.
template <bool kLinear, Activation act>
VOLT_HD void finish(const Args& g, int64_t i, int64_t j, float sum) {
  float* out = g.c + i * g.ldc + j;
  if constexpr (kLinear) {
    const float z = g.bias ? sum + g.bias[j] : sum;
    if (g.pre) g.pre[i * g.n + j] = z;
    *out = biasact::forward<act>(z);
  } else {
    *out = g.beta == 0.0f ? g.alpha * sum : ::fmaf(g.alpha, sum, g.beta * *out);  // beta 0 never reads C
  }
}

// The kernel's result computed on the host, element by element in the kernel's order (the header comment).
// Slow (no tiling); for the tests.
template <bool kLinear, Activation act = Activation::None>
void reference(const Args& g, const Plan& p) {
  std::vector<float> partials(static_cast<size_t>(p.splits * g.m * g.n));
  for (int64_t s = 0; s < p.splits; ++s)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        float acc = 0.0f;
        for (int64_t kk = p.k_begin(s); kk < p.k_end(s, g.k); ++kk) acc = std::fma(a_at(g, i, kk), b_at(g, kk, j), acc);
        partials[static_cast<size_t>((s * g.m + i) * g.n + j)] = acc;
      }
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) finish<kLinear, act>(g, i, j, fold(partials.data(), p.splits, g.m * g.n, i * g.n + j));
}

}  // namespace volt::small_gemm
