#pragma once
// 16-byte vector access for memory-bound kernels: Pack<T> is 16 bytes of T (4 f32, 8 f16/bf16, 2 f64), loaded and
// stored as one instruction where 2- or 4-byte accesses would take four to eight. A kernel may use packs over a
// run of values when the run starts 16-byte aligned and is whole packs long (packable).
#include <cstdint>
#include <initializer_list>

namespace volt::cuda {

// N values of T as one aligned vector: by default 16 bytes; Pack<Y, Pack<T>::kLen> holds the values of one pack of
// T in another (narrower) type Y, e.g. a norm's bf16 output of four f32 inputs (8 bytes).
template <class T, int N = 16 / static_cast<int>(sizeof(T))>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int kLen = N;
  T v[N];
};

// True when every pointer (null ones are skipped) is 16-byte aligned and `len` values of T are whole packs, so
// that rows of `len` values starting at these pointers may be read and written in packs.
template <class T>
bool packable(int64_t len, std::initializer_list<const void*> ptrs) {
  if (len <= 0 || len % Pack<T>::kLen != 0) return false;
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

#ifdef __CUDACC__
template <class T, int N = Pack<T>::kLen>
__device__ __forceinline__ Pack<T, N> load_pack(const T* src) { return *reinterpret_cast<const Pack<T, N>*>(src); }
template <class T, int N>
__device__ __forceinline__ void store_pack(T* dst, const Pack<T, N>& p) { *reinterpret_cast<Pack<T, N>*>(dst) = p; }
#endif

}  // namespace volt::cuda
