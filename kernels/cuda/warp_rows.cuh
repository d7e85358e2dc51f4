#pragma once
// Warp-per-row launches for row-wise kernels over short rows (layer_norm over a transformer's width): one warp
// owns a row and keeps it in registers, so the row is read from global memory once, in 16-byte loads, and its
// reductions are warp shuffles with no shared memory and no block barrier. Lane l holds the 16-byte packs
// l, l + 32, l + 64, ... of its row: at most K packs (K = 2, 4, 6 or 8), so a row qualifies when its length is a
// multiple of a pack and at most 32 * K packs long (1024 f32 or 2048 f16/bf16 values), and every pointer is
// 16-byte aligned. Other rows take the block-per-row kernels (row_blocks.cuh).
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include <volt/kernels/common/half.h>
#include <volt/kernels/cuda/pack.cuh>

namespace volt::cuda::warp_rows {

constexpr int kWarpsPerBlock = 8;  // 256 threads: eight rows per block
constexpr int kMaxPacks = 8;       // packs per lane (registers: 4 per pack)

// Packs per lane for rows of n values of T (2, 4, 6 or 8: instantiations stay few), or 0 when a row does not
// qualify: T not computed in float, n not a whole number of packs, more than kMaxPacks packs per lane, or a
// pointer (null ones are skipped) off 16-byte alignment.
template <class T>
int packs_per_lane(int64_t n, std::initializer_list<const void*> ptrs) {
  if constexpr (!std::is_same_v<acc_t<T>, float>) {
    return 0;
  } else {
    if (!packable<T>(n, ptrs)) return 0;
    const int64_t per_lane = (n / Pack<T>::kLen + 31) / 32;
    return per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : per_lane <= 6 ? 6 : per_lane <= kMaxPacks ? kMaxPacks : 0;
  }
}

// Calls f(std::integral_constant<int, K>{}) for the K packs_per_lane gives; false (nothing called) when the rows
// do not qualify.
template <class T, class F>
bool with_packs(int64_t n, std::initializer_list<const void*> ptrs, F&& f) {
  switch (packs_per_lane<T>(n, ptrs)) {
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case kMaxPacks: f(std::integral_constant<int, kMaxPacks>{}); return true;
    default: return false;
  }
}

inline unsigned blocks_for(int64_t rows) {
  constexpr int64_t cap = 65535LL * 16;
  const int64_t b = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(b < cap ? b : cap);
}

#ifdef __CUDACC__
// The lane's packs of one row: pack k is at offset (32 k + lane) * kLen, present while that is below n, so the
// present packs are a prefix (count() values). kLen is T's 16-byte pack unless given (a row in another dtype than
// the row it is laid out with, e.g. a bf16 gradient beside f32 x: packs of 4).
template <class T, int K, int N = Pack<T>::kLen>
struct LaneRow {
  static constexpr int kLen = N;
  Pack<T, N> p[K];
  int packs = 0;
  __device__ static int64_t offset(int k, int lane) { return (int64_t(k) * 32 + lane) * kLen; }
  __device__ void load(const T* row, int64_t n, int lane) {
    packs = 0;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (offset(k, lane) < n) {
        p[k] = load_pack<T, N>(row + offset(k, lane));
        ++packs;
      }
  }
  __device__ int count() const { return packs * kLen; }
  // Value i of the lane's share (pack i / kLen, element i % kLen) in float.
  __device__ float at(int i) const { return float(p[i / kLen].v[i % kLen]); }
};

// Calls f(k, j) for each present pack k of the lane, j its offset in the row.
template <int K, int kLen, class F>
__device__ void for_each_pack(int64_t n, int lane, F&& f) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t j = (int64_t(k) * 32 + lane) * kLen;
    if (j < n) f(k, j);
  }
}

// The f32 parameters (a norm's weight or bias) of the N elements at j: 16-byte loads (the launch checked the
// pointer with packable), or `fill` when there is no parameter. N is a multiple of 4 (a pack of f32, f16 or bf16).
template <int N>
__device__ Pack<float, N> param_pack(const float* w, int64_t j, float fill) {
  static_assert(N % 4 == 0, "param_pack: whole f32 packs");
  Pack<float, N> out;
#pragma unroll
  for (int q = 0; q < N; q += 4) {
    if (w != nullptr) {
      const Pack<float, 4> v = load_pack<float, 4>(w + j + q);
#pragma unroll
      for (int i = 0; i < 4; ++i) out.v[q + i] = v.v[i];
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) out.v[q + i] = fill;
    }
  }
  return out;
}

// Sums over the warp by butterfly (every lane gets them, in the same order on every lane).
__device__ inline void warp_allsum2(float& a, float& b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// The warp's row: this warp's first row and the stride between its rows (a warp's lanes share them, so loops
// over rows are warp-uniform and the full-mask shuffles are safe).
__device__ inline int64_t first_row() {
  return int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
__device__ inline int64_t row_stride() { return int64_t(gridDim.x) * (blockDim.x >> 5); }
#endif

}  // namespace volt::cuda::warp_rows
