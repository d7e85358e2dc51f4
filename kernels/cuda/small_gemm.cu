// Volt's f32 GEMM for small outputs (the plan and the arithmetic: kernels/common/small_gemm.h). Block
// (x, 0, z) computes output tile x (row-major over the tiles) over k slice z: the slice is walked one kSlab-deep stage at a time
// through shared memory, each thread keeping a 2 x 2 micro-tile of fused multiply-add chains. With one slice the
// block writes the output itself; with several it writes its partial sums and fold_kernel adds the slices in
// order and applies the epilogue.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include <volt/kernels/backend/scratch.h>
#include <volt/kernels/common/small_gemm.h>
#include <volt/kernels/cuda/gemm.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>

namespace volt::cuda {

namespace {

namespace sg = volt::small_gemm;
static_assert(sg::kTile == sg::kSlab, "the staging loop indexes a tile's rows and a slab's depth alike");

template <bool kLinear, Activation act>
__global__ void __launch_bounds__(sg::kThreadsX * sg::kThreadsY)
    small_gemm_kernel(sg::Args g, sg::Plan p, float* partials) {
  // [kk][row or col]; the +1 keeps a warp's stores (consecutive kk) on distinct banks.
  __shared__ float as[sg::kSlab][sg::kTile + 1];
  __shared__ float bs[sg::kSlab][sg::kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * sg::kThreadsX + tx;
  constexpr int kThreads = sg::kThreadsX * sg::kThreadsY;
  const int64_t tile = blockIdx.x;  // tiles in row-major order (grid x: no 65535 limit on the row tiles)
  const int64_t i0 = tile / p.tiles_n * sg::kTile, j0 = tile % p.tiles_n * sg::kTile;
  const int64_t split = blockIdx.z;
  const int64_t k_lo = p.k_begin(split), k_hi = p.k_end(split, g.k);
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (int64_t k0 = k_lo; k0 < k_hi; k0 += sg::kSlab) {
    const int kn = static_cast<int>(k_hi - k0 < sg::kSlab ? k_hi - k0 : sg::kSlab);
    // Stage the slab. Consecutive threads read consecutive addresses: along k for a row-major A (B^T), along
    // the rows (columns) for a transposed one. Outside the matrix: zeros, whose results are never stored.
    for (int e = tid; e < sg::kTile * sg::kSlab; e += kThreads) {
      const int outer = e / sg::kSlab, inner = e % sg::kSlab;  // kTile == kSlab: either can index either
      {
        const int r = g.trans_a ? inner : outer, kk = g.trans_a ? outer : inner;
        const int64_t i = i0 + r;
        as[kk][r] = (i < g.m && kk < kn) ? sg::a_at(g, i, k0 + kk) : 0.0f;
      }
      {
        const int c = g.trans_b ? outer : inner, kk = g.trans_b ? inner : outer;
        const int64_t j = j0 + c;
        bs[kk][c] = (j < g.n && kk < kn) ? sg::b_at(g, k0 + kk, j) : 0.0f;
      }
    }
    __syncthreads();
    for (int kk = 0; kk < kn; ++kk) {
      const float a0 = as[kk][ty], a1 = as[kk][ty + sg::kThreadsY];
      const float b0 = bs[kk][tx], b1 = bs[kk][tx + sg::kThreadsX];
      acc[0][0] = fmaf(a0, b0, acc[0][0]);
      acc[0][1] = fmaf(a0, b1, acc[0][1]);
      acc[1][0] = fmaf(a1, b0, acc[1][0]);
      acc[1][1] = fmaf(a1, b1, acc[1][1]);
    }
    __syncthreads();
  }
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      const int64_t i = i0 + ty + r * sg::kThreadsY, j = j0 + tx + c * sg::kThreadsX;
      if (i >= g.m || j >= g.n) continue;
      if (p.splits == 1) sg::finish<kLinear, act>(g, i, j, acc[r][c]);
      else partials[(split * g.m + i) * g.n + j] = acc[r][c];
    }
}

template <bool kLinear, Activation act>
__global__ void small_gemm_fold_kernel(sg::Args g, int64_t splits, const float* partials) {
  const int64_t total = g.m * g.n;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x)
    sg::finish<kLinear, act>(g, idx / g.n, idx % g.n, sg::fold(partials, splits, total, idx));
}

// The device's multiprocessor count, asked once per device.
int multiprocessors(const Device& device) {
  static std::atomic<int> counts[64] = {};
  if (device.index < 0 || device.index >= 64) return cuda_multiprocessor_count(device.index);
  int v = counts[device.index].load(std::memory_order_relaxed);
  if (v == 0) {
    v = cuda_multiprocessor_count(device.index);
    counts[device.index].store(v, std::memory_order_relaxed);
  }
  return v;
}

template <bool kLinear, Activation act>
void launch(const sg::Args& g, const Device& device) {
  const sg::Plan p = sg::plan(g.m, g.n, g.k, multiprocessors(device));
  const cudaStream_t stream = launch_stream();
  Tensor partials;  // stream-ordered: freed once the fold below is queued
  if (p.splits > 1) partials = backend::scratch({p.splits, g.m, g.n}, DType::f32, device);
  float* pp = partials.defined() ? static_cast<float*>(partials.data_ptr()) : nullptr;
  const dim3 grid(static_cast<unsigned>(p.tiles_m * p.tiles_n), 1, static_cast<unsigned>(p.splits));
  small_gemm_kernel<kLinear, act><<<grid, dim3(sg::kThreadsX, sg::kThreadsY), 0, stream>>>(g, p, pp);
  VOLT_CUDA_CHECK_LAUNCH();
  if (p.splits > 1) {
    const int64_t total = g.m * g.n;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
    small_gemm_fold_kernel<kLinear, act><<<blocks, 256, 0, stream>>>(g, p.splits, pp);
    VOLT_CUDA_CHECK_LAUNCH();
  }
}

sg::Args args_of(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  sg::Args g;
  g.a = static_cast<const float*>(a.data_ptr());
  g.b = static_cast<const float*>(b.data_ptr());
  g.c = static_cast<float*>(c.data_ptr());
  g.m = d.m;
  g.n = d.n;
  g.k = d.k;
  g.trans_a = d.trans_a;
  g.trans_b = d.trans_b;
  g.lda = d.lda;
  g.ldb = d.ldb;
  g.ldc = d.ldc;
  return g;
}

}  // namespace

bool small_gemm_suits(const GemmDesc& d, DType dtype) {
  return dtype == DType::f32 && d.small_gemm && !d.allow_tf32 && sg::suits(d.m, d.n, d.k, d.batch);
}

void gemm_small(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  sg::Args g = args_of(d, a, b, c);
  g.alpha = static_cast<float>(d.alpha);
  g.beta = static_cast<float>(d.beta);
  launch<false, Activation::None>(g, c.device());
}

void linear_act_small(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                  const Tensor& pre, Activation act) {
  sg::Args g = args_of(d, a, b, c);
  g.bias = bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr;
  g.pre = pre.defined() ? static_cast<float*>(pre.data_ptr()) : nullptr;
  biasact::with_activation(act, [&](auto ac) { launch<true, decltype(ac)::value>(g, c.device()); });
}

}  // namespace volt::cuda
