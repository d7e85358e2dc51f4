// CUDA kernels for cumsum / cumprod (and cumprod's backward), sort / topk and flip.
// Scans: one thread per (outer, inner) line running the same per-line loop as the CPU (kernels/common/scan.h):
// exact CPU agreement and no cross-thread carries; a long single line is serial (not a parallel scan).
// Sort: every line padded to a power of two P and bitonic-sorted in global scratch, all lines at once, one launch
// per merge step (log2(P) (log2(P) + 1) / 2 launches); the comparator is common/sort.h's total order, so the result
// is the CPU's element for element (ties in position order).
#include <cuda_runtime.h>

#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/tensor_ops.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/scan.h>
#include <volt/kernels/common/sort.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace {

#define VOLT_GRID_STRIDE(t, total) \
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < (total); t += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void cumsum_kernel(T* out, const T* in, int64_t lines, int64_t D, int64_t inner, bool reverse) {
  VOLT_GRID_STRIDE(t, lines) {
    const int64_t base = (t / inner) * D * inner + t % inner;
    cumsum_line(out + base, in + base, D, inner, reverse);
  }
}

template <class T>
__global__ void cumprod_kernel(T* out, const T* in, int64_t lines, int64_t D, int64_t inner) {
  VOLT_GRID_STRIDE(t, lines) {
    const int64_t base = (t / inner) * D * inner + t % inner;
    cumprod_line(out + base, in + base, D, inner);
  }
}

template <class T>
__global__ void cumprod_backward_kernel(T* g_in, const T* g_out, const T* x, int64_t lines, int64_t D, int64_t inner) {
  VOLT_GRID_STRIDE(t, lines) {
    const int64_t base = (t / inner) * D * inner + t % inner;
    cumprod_backward_line(g_in + base, g_out + base, x + base, D, inner);
  }
}

// Scratch line l, slot j < D holds element j of line l; slots D..P-1 are padding (position -1).
template <class T, class K>
__global__ void sort_load_kernel(K* keys, int64_t* pos, const T* in, int64_t total, int64_t P, int64_t D,
                                 int64_t inner) {
  VOLT_GRID_STRIDE(t, total) {
    const int64_t l = t / P, j = t % P;
    if (j < D) {
      keys[t] = static_cast<K>(in[(l / inner) * D * inner + j * inner + l % inner]);
      pos[t] = j;
    } else {
      keys[t] = K(0);
      pos[t] = -1;
    }
  }
}

// One compare-exchange step of the bitonic network (block size `k`, distance `j`) on every line.
template <class K>
__global__ void sort_step_kernel(K* keys, int64_t* pos, int64_t total, int64_t P, int64_t k, int64_t j,
                                 bool descending) {
  VOLT_GRID_STRIDE(t, total) {
    const int64_t i = t % P, partner = i ^ j;
    if (partner <= i) continue;
    const int64_t a = t, b = t - i + partner;
    const bool up = (i & k) == 0;  // this block ends in sort order (else reversed, for the next merge)
    const bool swap = up ? sort_before(keys[b], pos[b], keys[a], pos[a], descending)
                         : sort_before(keys[a], pos[a], keys[b], pos[b], descending);
    if (swap) {
      const K tk = keys[a];
      keys[a] = keys[b];
      keys[b] = tk;
      const int64_t tp = pos[a];
      pos[a] = pos[b];
      pos[b] = tp;
    }
  }
}

template <class T>
__global__ void sort_store_kernel(T* values, int64_t* indices, const T* in, const int64_t* pos, int64_t total,
                                  int64_t P, int64_t D, int64_t inner, int64_t k) {
  VOLT_GRID_STRIDE(t, total) {  // t over (outer, k, inner) outputs
    const int64_t q = t % inner, j = (t / inner) % k, p = t / (inner * k);
    const int64_t src = pos[(p * inner + q) * P + j];
    values[t] = in[p * D * inner + src * inner + q];  // the element itself (keys may be widened)
    indices[t] = src;
  }
}

template <class T>
__global__ void flip_kernel(T* out, const T* in, int64_t total, FlipGeometry g) {
  VOLT_GRID_STRIDE(t, total) { out[t] = in[flip_source_offset(g, t)]; }
}

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner, bool reverse) {
  const int64_t lines = outer * inner;
  if (lines == 0 || D == 0) return;
  dispatch_numeric(out.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    cumsum_kernel<T><<<blocks_for(lines), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()), lines, D, inner, reverse);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void cumprod(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner) {
  const int64_t lines = outer * inner;
  if (lines == 0 || D == 0) return;
  dispatch_numeric(out.dtype(), "cumprod", [&](auto tag) {
    using T = decltype(tag);
    cumprod_kernel<T><<<blocks_for(lines), 256, 0, launch_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()), lines, D, inner);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void cumprod_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& in, int64_t outer, int64_t D,
                      int64_t inner) {
  const int64_t lines = outer * inner;
  if (lines == 0 || D == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    cumprod_backward_kernel<T><<<blocks_for(lines), 256, 0, launch_stream()>>>(
        static_cast<T*>(grad_in.data_ptr()), static_cast<const T*>(grad_out.data_ptr()),
        static_cast<const T*>(in.data_ptr()), lines, D, inner);
  };
  if (grad_in.dtype() == DType::f32)
    run(float{});
  else if (grad_in.dtype() == DType::f64)
    run(double{});
  else
    VOLT_FAIL("cumprod_backward: expected float32/float64, got ", dtype_name(grad_in.dtype()));
  VOLT_CUDA_CHECK_LAUNCH();
}

void sort(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t D, int64_t inner,
          int64_t k, bool descending) {
  const int64_t lines = outer * inner;
  if (lines == 0 || D == 0 || k == 0) return;
  int64_t P = 1;
  while (P < D) P <<= 1;
  const int64_t total = lines * P;
  cudaStream_t stream = launch_stream();
  dispatch_all(in.dtype(), "sort", [&](auto tag) {
    using T = decltype(tag);
    using K = sort_key_t<T>;
    Tensor key_buf = empty({total * static_cast<int64_t>(sizeof(K))}, DType::u8, in.device());
    Tensor pos_buf = empty({total}, DType::i64, in.device());
    K* keys = static_cast<K*>(key_buf.data_ptr());
    int64_t* pos = static_cast<int64_t*>(pos_buf.data_ptr());
    const T* src = static_cast<const T*>(in.data_ptr());
    sort_load_kernel<T, K><<<blocks_for(total), 256, 0, stream>>>(keys, pos, src, total, P, D, inner);
    VOLT_CUDA_CHECK_LAUNCH();
    for (int64_t kk = 2; kk <= P; kk <<= 1)
      for (int64_t j = kk >> 1; j > 0; j >>= 1) {
        sort_step_kernel<K><<<blocks_for(total), 256, 0, stream>>>(keys, pos, total, P, kk, j, descending);
        VOLT_CUDA_CHECK_LAUNCH();
      }
    const int64_t outs = outer * k * inner;
    sort_store_kernel<T><<<blocks_for(outs), 256, 0, stream>>>(static_cast<T*>(values.data_ptr()),
                                                                static_cast<int64_t*>(indices.data_ptr()), src, pos,
                                                                outs, P, D, inner, k);
    VOLT_CUDA_CHECK_LAUNCH();
  });
}

void flip(const Tensor& out, const Tensor& in, const FlipGeometry& g) {
  const int64_t total = out.numel();
  if (total == 0) return;
  dispatch_all(out.dtype(), "flip", [&](auto tag) {
    using T = decltype(tag);
    flip_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(static_cast<T*>(out.data_ptr()),
                                                                       static_cast<const T*>(in.data_ptr()), total, g);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::TensorOpKernels tensor_op_kernels{
    .cumsum = {cumsum, backend::kNumeric},
    .cumprod = {cumprod, backend::kNumeric},
    .cumprod_backward = {cumprod_backward, backend::kF32F64},
    .sort = {sort, backend::kAllDTypes},
    .flip = {flip, backend::kAllDTypes},
};

}  // namespace volt::cuda
