// CUDA softmax / log_softmax, fused class-index losses and dropout. The math is kernels/common/softmax.h; this
// file holds indexing and launches only. Layouts are described in kernels/cpu/nn_backend.h.
#include <limits>

#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cpu/nn_backend.h>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {

using rows::kMaxThreads;
using rows::threads_for;

// Block-wide merge of per-thread (max, sum-exp) pairs and an optional plain sum; every thread gets the result.
template <class A>
__device__ void block_lse(A& m, A& s, A& sx) {
  __shared__ A sm[kMaxThreads], ss[kMaxThreads], sxs[kMaxThreads];
  sm[threadIdx.x] = m;
  ss[threadIdx.x] = s;
  sxs[threadIdx.x] = sx;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      A m1 = sm[threadIdx.x], s1 = ss[threadIdx.x];
      nnmath::lse_merge(m1, s1, sm[threadIdx.x + k], ss[threadIdx.x + k]);
      sm[threadIdx.x] = m1;
      ss[threadIdx.x] = s1;
      sxs[threadIdx.x] += sxs[threadIdx.x + k];
    }
    __syncthreads();
  }
  m = sm[0];
  s = ss[0];
  sx = sxs[0];
  __syncthreads();
}

// One block per (outer, inner) row of the softmax dim.
template <class T>
__global__ void softmax_kernel(const T* in, T* out, int64_t r, int64_t inner, bool log) {
  using A = acc_t<T>;
  const int64_t q = blockIdx.x;
  const int64_t o = q / inner, i = q % inner;
  const T* x = in + o * r * inner + i;
  T* y = out + o * r * inner + i;
  A m = -std::numeric_limits<A>::infinity(), s = A(0), unused = A(0);
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) nnmath::lse_push(m, s, A(x[k * inner]));
  block_lse(m, s, unused);
  const A lse = nnmath::lse_finish(m, s);
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
    A v = A(x[k * inner]) - lse;
    y[k * inner] = log ? T(v) : T(em::exp_(v));
  }
}

// One block per loss row: log-sum-exp and the row loss (written to `rows` in the accumulation type).
template <class T>
__global__ void class_loss_rows_kernel(const T* in, const int64_t* target, acc_t<T>* lse_out, acc_t<T>* rows,
                                       int64_t c, int64_t inner, CeParams p) {
  using A = acc_t<T>;
  const int64_t row = blockIdx.x;
  const int64_t b = row / inner, i = row % inner;
  const T* x = in + b * c * inner + i;
  const int64_t tgt = target[row];
  const bool ignored = tgt == p.ignore_index;
  // Out-of-range targets are not checked on the device (that would need a host sync); they give NaN.
  const bool bad = !ignored && (tgt < 0 || tgt >= c);
  if (p.nll) {
    if (threadIdx.x == 0)
      rows[row] = ignored ? A(0) : (bad ? A(NAN) : A(-A(x[tgt * inner])));
    return;
  }
  A m = -std::numeric_limits<A>::infinity(), s = A(0), sx = A(0);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    A v = A(x[j * inner]);
    nnmath::lse_push(m, s, v);
    sx += v;
  }
  block_lse(m, s, sx);
  if (threadIdx.x == 0) {
    const A l = nnmath::lse_finish(m, s);
    lse_out[row] = l;
    rows[row] = ignored ? A(0) : (bad ? A(NAN) : nnmath::ce_row_loss(l, A(x[tgt * inner]), sx, c, A(p.label_smoothing)));
  }
}

// One block: reduces the row losses and counts non-ignored targets; writes the loss and the count.
template <class T>
__global__ void class_loss_reduce_kernel(const acc_t<T>* rows, const int64_t* target, int64_t nrows, T* out,
                                         acc_t<T>* count, CeParams p) {
  using A = acc_t<T>;
  __shared__ double sl[kMaxThreads], sc[kMaxThreads];
  double l = 0, cnt = 0;
  for (int64_t k = threadIdx.x; k < nrows; k += blockDim.x) {
    if (target[k] != p.ignore_index) cnt += 1;
    if (p.reduction != LossReduction::None) l += static_cast<double>(rows[k]);
  }
  sl[threadIdx.x] = l;
  sc[threadIdx.x] = cnt;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      sl[threadIdx.x] += sl[threadIdx.x + k];
      sc[threadIdx.x] += sc[threadIdx.x + k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    count[0] = A(sc[0]);
    if (p.reduction == LossReduction::Sum) out[0] = T(A(sl[0]));
    if (p.reduction == LossReduction::Mean) out[0] = T(A(sl[0] / sc[0]));
  }
}

template <class T>
__global__ void rows_to_out_kernel(const acc_t<T>* rows, T* out, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    out[k] = T(rows[k]);
}

// One thread per input element: grad = g_row * (softmax - (1 - eps) onehot - eps / C), or -g_row * onehot (nll).
template <class T>
__global__ void class_loss_bwd_kernel(T* gi, const T* go, const T* in, const int64_t* target, const acc_t<T>* lse,
                                      const acc_t<T>* count, int64_t total, int64_t c, int64_t inner, CeParams p) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner;
    const int64_t j = (e / inner) % c;
    const int64_t b = e / (inner * c);
    const int64_t row = b * inner + i;
    const int64_t tgt = target[row];
    if (tgt == p.ignore_index) {
      gi[e] = T(A(0));
      continue;
    }
    A g = A(go[p.reduction == LossReduction::None ? row : 0]);
    if (p.reduction == LossReduction::Mean) g = g / count[0];
    if (p.nll) {
      gi[e] = T(j == tgt ? -g : A(0));
    } else {
      A prob = em::exp_(A(in[e]) - lse[row]);
      gi[e] = T(g * nnmath::ce_grad(prob, j == tgt, c, A(p.label_smoothing)));
    }
  }
}

template <class T>
__global__ void dropout_fwd_kernel(const T* in, T* out, bool* mask, int64_t n, uint64_t seed, uint64_t offset,
                                   float p, acc_t<T> scale) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = nnmath::dropout_keep(seed, offset, static_cast<uint64_t>(e), p);
    mask[e] = keep;
    out[e] = keep ? T(A(in[e]) * scale) : T(A(0));
  }
}

template <class T>
__global__ void dropout_bwd_kernel(const T* go, const bool* mask, T* gi, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    gi[e] = mask[e] ? T(A(go[e]) * scale) : T(A(0));
}

}  // namespace

void softmax_fwd(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  const int64_t rows = outer * inner;
  if (rows == 0 || r == 0) return;
  dispatch_floating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<static_cast<unsigned>(rows), threads_for(r), 0, compute_stream(out)>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), r, inner, log);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void class_loss_fwd(const Tensor& out, const Tensor& lse, const Tensor& count, const Tensor& input,
                    const Tensor& target, int64_t n, int64_t c, int64_t inner, const CeParams& p) {
  const int64_t nrows = n * inner;
  dispatch_floating(input.dtype(), p.nll ? "nll_loss" : "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    cudaStream_t st = compute_stream(input);
    Tensor rows = empty({nrows}, count.dtype(), input.device());  // per-row losses in the accumulation type
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    A* rp = static_cast<A*>(rows.data_ptr());
    if (nrows > 0) {
      class_loss_rows_kernel<T><<<static_cast<unsigned>(nrows), threads_for(c), 0, st>>>(
          static_cast<const T*>(input.data_ptr()), t, p.nll ? nullptr : static_cast<A*>(lse.data_ptr()), rp, c, inner,
          p);
      VOLT_CUDA_CHECK_LAUNCH();
    }
    if (p.reduction == LossReduction::None && nrows > 0) {
      rows_to_out_kernel<T><<<blocks_for(nrows), 256, 0, st>>>(rp, static_cast<T*>(out.data_ptr()), nrows);
      VOLT_CUDA_CHECK_LAUNCH();
    }
    class_loss_reduce_kernel<T><<<1, kMaxThreads, 0, st>>>(rp, t, nrows, static_cast<T*>(out.data_ptr()),
                                                           static_cast<A*>(count.data_ptr()), p);
    VOLT_CUDA_CHECK_LAUNCH();
  });
}

void class_loss_bwd(const Tensor& grad_input, const Tensor& grad_out, const Tensor& input, const Tensor& target,
                    const Tensor& lse, const Tensor& count, int64_t n, int64_t c, int64_t inner, const CeParams& p) {
  const int64_t total = n * c * inner;
  if (total == 0) return;
  dispatch_floating(input.dtype(), p.nll ? "nll_loss backward" : "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    class_loss_bwd_kernel<T><<<blocks_for(total), 256, 0, compute_stream(grad_input)>>>(
        static_cast<T*>(grad_input.data_ptr()), static_cast<const T*>(grad_out.data_ptr()),
        static_cast<const T*>(input.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        p.nll ? nullptr : static_cast<const A*>(lse.data_ptr()), static_cast<const A*>(count.data_ptr()), total, c,
        inner, p);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void dropout_fwd(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset, double p) {
  const int64_t n = in.numel();
  if (n == 0) return;
  dispatch_floating(in.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A scale = p < 1.0 ? A(1.0 / (1.0 - p)) : A(0);
    dropout_fwd_kernel<T><<<blocks_for(n), 256, 0, compute_stream(out)>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), static_cast<bool*>(mask.data_ptr()), n,
        seed, offset, static_cast<float>(p), scale);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void dropout_bwd(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  const int64_t n = grad_out.numel();
  if (n == 0) return;
  dispatch_floating(grad_out.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    dropout_bwd_kernel<T><<<blocks_for(n), 256, 0, compute_stream(grad_in)>>>(
        static_cast<const T*>(grad_out.data_ptr()), static_cast<const bool*>(mask.data_ptr()),
        static_cast<T*>(grad_in.data_ptr()), n, A(scale));
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
