// CUDA fused class-index losses (cross_entropy, nll_loss): one block per loss row for the log-sum-exp, one block
// for the reduction, one thread per element for the backward. The math is kernels/common/softmax.h. Also the fused
// classifier (fused_cross_entropy): one block per row for its loss and gradient (kernels/common/fused.h), the row
// held in registers for a GPT-2-sized vocabulary.
#include <cstdint>
#include <limits>

#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/fused.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/common/softmax.h>
#include <volt/kernels/cuda/block_lse.cuh>
#include <volt/kernels/cuda/index_check.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {

using rows::block_lse;
using rows::kMaxThreads;
using rows::row_blocks;
using rows::threads_for;

// A target outside [0, c) that is not ignore_index: recorded (runtime/index_check.h) when `report`.
__device__ bool bad_target(int64_t row, int64_t t, int64_t c, int64_t ignore_index, IndexCheckRecord* rec,
                           IndexCheck check, bool report) {
  return t != ignore_index && out_of_range(row, t, c, rec, check, report);
}

// One block per loss row (blocks stride over rows past the grid cap): log-sum-exp and the row loss (written to
// `rows` in the accumulation type).
template <class T>
__global__ void class_loss_rows_kernel(const T* in, const int64_t* target, acc_t<T>* lse_out, acc_t<T>* rows,
                                       int64_t nrows, int64_t c, int64_t inner, CeParams p, IndexCheckRecord* rec) {
  using A = acc_t<T>;
  for (int64_t row = blockIdx.x; row < nrows; row += gridDim.x) {
    const int64_t b = row / inner, i = row % inner;
    const T* x = in + b * c * inner + i;
    const int64_t tgt = target[row];
    const bool ignored = tgt == p.ignore_index;
    // An out-of-range target gives NaN and is recorded, to be reported at the next synchronisation.
    const bool bad = bad_target(row, tgt, c, p.ignore_index, rec, p.check, threadIdx.x == 0);
    if (p.nll) {
      if (threadIdx.x == 0) rows[row] = ignored ? A(0) : (bad ? A(NAN) : A(-A(x[tgt * inner])));
      continue;
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
      rows[row] = ignored ? A(0)
                          : (bad ? A(NAN) : nnmath::ce_row_loss(l, A(x[tgt * inner]), sx, c, A(p.label_smoothing)));
    }
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
                                      const acc_t<T>* count, int64_t total, int64_t c, int64_t inner, CeParams p,
                                      IndexCheckRecord* rec) {
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
    if (bad_target(row, tgt, c, p.ignore_index, rec, p.check, j == 0)) {  // NaN and recorded, as in the forward
      gi[e] = T(A(NAN));
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

void class_loss_fwd(const Tensor& out, const Tensor& lse, const Tensor& count, const Tensor& input,
                    const Tensor& target, int64_t n, int64_t c, int64_t inner, const CeParams& p) {
  const int64_t nrows = n * inner;
  dispatch_floating(input.dtype(), p.nll ? "nll_loss" : "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    cudaStream_t st = launch_stream();
    Tensor rows = empty({nrows}, count.dtype(), input.device());  // per-row losses in the accumulation type
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    A* rp = static_cast<A*>(rows.data_ptr());
    if (nrows > 0) {
      IndexCheckRecord* rec = index_check_record_for(input, p.check);
      class_loss_rows_kernel<T><<<row_blocks(nrows), threads_for(c), 0, st>>>(
          static_cast<const T*>(input.data_ptr()), t, p.nll ? nullptr : static_cast<A*>(lse.data_ptr()), rp, nrows, c,
          inner, p, rec);
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
    IndexCheckRecord* rec = index_check_record_for(input, p.check);
    class_loss_bwd_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
        static_cast<T*>(grad_input.data_ptr()), static_cast<const T*>(grad_out.data_ptr()),
        static_cast<const T*>(input.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        p.nll ? nullptr : static_cast<const A*>(lse.data_ptr()), static_cast<const A*>(count.data_ptr()), total, c,
        inner, p, rec);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

// One block per row of the chunk: the row's log-sum-exp (online max and sum-exp, one read of the row), its loss,
// then its gradient over the same row (a second read; the row may be the logits' own storage: every read of the row
// for the statistics happens before the block's barrier inside block_lse, and x[t] before the barrier below). The
// row is read VEC elements at a time as one aligned access (16 bytes; VEC divides v and both pointers are 16-byte
// aligned, else VEC is 1): f16/bf16 logits are read in their dtype and everything is computed in f32.
template <class T, int VEC>
__global__ void classifier_fwd_kernel(acc_t<T>* loss_rows, T* grad, const T* logits, const int64_t* target,
                                      const acc_t<T>* scale, int64_t row0, int64_t nrows, int64_t v,
                                      int64_t ignore_index, IndexCheckRecord* rec, IndexCheck check) {
  using A = acc_t<T>;
  using P = loops_detail::Pack<VEC, T>;
  const int64_t nv = v / VEC;
  for (int64_t i = blockIdx.x; i < nrows; i += gridDim.x) {
    const int64_t row = row0 + i, t = target[row];
    const T* x = logits + row * v;
    const P* xp = reinterpret_cast<const P*>(x);
    const bool ignored = t == ignore_index;
    // An out-of-range target gives NaN and is recorded, to be reported at the next synchronisation.
    const bool bad = bad_target(row, t, v, ignore_index, rec, check, threadIdx.x == 0);
    A m = -std::numeric_limits<A>::infinity(), se = A(0);
    if (!ignored)
      for (int64_t k = threadIdx.x; k < nv; k += blockDim.x) {
        const P pk = xp[k];
#pragma unroll
        for (int e = 0; e < VEC; ++e) nnmath::lse_push(m, se, A(pk.v[e]));
      }
    block_lse(m, se);
    const A lse = nnmath::lse_finish(m, se);
    const A xt = ignored || bad ? A(0) : A(x[t]);
    __syncthreads();  // every thread has read x[t] before any thread overwrites the row
    if (threadIdx.x == 0) loss_rows[i] = ignored ? A(0) : (bad ? A(NAN) : fusedmath::classifier_row_loss(lse, xt));
    if (grad == nullptr) continue;
    const A sc = bad ? A(NAN) : *scale;
    P* gp = reinterpret_cast<P*>(grad + row * v);
    for (int64_t k = threadIdx.x; k < nv; k += blockDim.x) {
      const P pk = xp[k];
      P out;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        out.v[e] = ignored ? T(A(0)) : T(fusedmath::classifier_grad(A(pk.v[e]), lse, k * VEC + e == t, sc));
      gp[k] = out;
    }
  }
}

// ---- Rows held in registers: a GPT-2 vocabulary's row (32k to 53k f16/bf16 logits) is read once. --------------
// The block kernel above reads each row twice: with eight 256-thread blocks per SM the rows in flight (100 KB each
// for GPT-2's 50304 bf16 logits, 105 MB on 132 SMs) exceed the L2, so the second read likely goes back to memory
// (by count; unmeasured). Here a block of kRowThreads loads its row's packs (up to kRowPacks 16-byte packs per
// thread) into registers at once, takes the log-sum-exp from them and writes the gradient from them: one read and
// one write per element. Same per-element math (nnmath::lse_push, fusedmath::classifier_grad); the merge order
// differs from the block kernel's, so results agree to rounding. 512 threads of 13 packs at 128 registers (ptxas,
// sm_90: no spills) is one block per SM with 106 KB of loads in flight; 768 threads of 9 packs (80 registers) and
// 1024 of 7 (64) spilled.
constexpr int kRowThreads = 512;
constexpr int kRowPacks = 13;

// Merges (m, s) over the block: a warp butterfly (lse_merge), then the warps' results in warp 0; every thread gets
// the block's. `sm`/`ss` hold one value per warp.
template <class A>
__device__ void block_lse_warps(A& m, A& s, A* sm, A* ss) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    nnmath::lse_merge(m, s, m2, s2);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? sm[lane] : -std::numeric_limits<A>::infinity();
    s = lane < warps ? ss[lane] : A(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const A m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      nnmath::lse_merge(m, s, m2, s2);
    }
    if (lane == 0) {
      sm[0] = m;
      ss[0] = s;
    }
  }
  __syncthreads();
  m = sm[0];
  s = ss[0];
  __syncthreads();  // every thread has read the result before the next row's merge writes over it
}

// One block per row (blocks stride over rows); thread t holds packs t, t + kRowThreads, ... of its row. The row
// may be the gradient's own storage: every read of it (the packs and x[t]) happens before the block's first
// barrier, every write after it. Rows hold at most kRowThreads * kRowPacks packs, so in-row indices are 32-bit.
template <class T>
__global__ void __launch_bounds__(kRowThreads, 1)
    classifier_fwd_rows_kernel(acc_t<T>* loss_rows, T* grad, const T* logits, const int64_t* target,
                               const acc_t<T>* scale, int64_t row0, int64_t nrows, int64_t v, int64_t ignore_index,
                               IndexCheckRecord* rec, IndexCheck check) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using P = loops_detail::Pack<VEC, T>;
  __shared__ A sm[kRowThreads / 32], ss[kRowThreads / 32];
  const int nv = static_cast<int>(v / VEC);
  for (int64_t i = blockIdx.x; i < nrows; i += gridDim.x) {
    const int64_t row = row0 + i, t64 = target[row];
    const bool ignored = t64 == ignore_index;
    const bool bad = bad_target(row, t64, v, ignore_index, rec, check, threadIdx.x == 0);  // as the block kernel
    const int t = ignored || bad ? -1 : static_cast<int>(t64);
    // This thread's packs are base[k * kRowThreads] for k * kRowThreads < left (one base pointer, constant
    // offsets); an ignored row's are not read (its loss and gradient are zeros).
    const int tid = static_cast<int>(threadIdx.x);
    const P* base = reinterpret_cast<const P*>(logits + row * v) + tid;
    const int left = (ignored ? 0 : nv) - tid;
    P reg[kRowPacks];
#pragma unroll
    for (int k = 0; k < kRowPacks; ++k)
      if (k * kRowThreads < left) reg[k] = base[k * kRowThreads];
    const A xt = t < 0 ? A(0) : A(logits[row * v + t]);
    A m = -std::numeric_limits<A>::infinity(), se = A(0);
#pragma unroll
    for (int k = 0; k < kRowPacks; ++k) {
      if (k * kRowThreads >= left) continue;
#pragma unroll
      for (int e = 0; e < VEC; ++e) nnmath::lse_push(m, se, A(reg[k].v[e]));
    }
    block_lse_warps(m, se, sm, ss);
    const A lse = nnmath::lse_finish(m, se);
    if (threadIdx.x == 0) loss_rows[i] = ignored ? A(0) : (bad ? A(NAN) : fusedmath::classifier_row_loss(lse, xt));
    if (grad == nullptr) continue;
    const A sc = bad ? A(NAN) : *scale;
    P* gbase = reinterpret_cast<P*>(grad + row * v) + tid;
    const int t_local = t - tid * VEC;  // the target's offset from this thread's first element
#pragma unroll
    for (int k = 0; k < kRowPacks; ++k) {
      if (k * kRowThreads >= nv - tid) continue;
      P out;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        out.v[e] = ignored ? T(A(0))
                           : T(fusedmath::classifier_grad(A(reg[k].v[e]), lse,
                                                          t >= 0 && k * kRowThreads * VEC + e == t_local, sc));
      gbase[k * kRowThreads] = out;
    }
  }
}

void classifier_fwd(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
                    const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index,
                    IndexCheck check) {
  if (rows == 0) return;
  IndexCheckRecord* rec = index_check_record_for(logits, check);
  dispatch_floating(logits.dtype(), "classifier_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    constexpr int kVec = 16 / sizeof(T);
    T* g = grad.defined() ? static_cast<T*>(grad.data_ptr()) : nullptr;
    const T* x = static_cast<const T*>(logits.data_ptr());
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = v % kVec == 0 && aligned(x) && (g == nullptr || aligned(g));
    // f16/bf16 rows of more than 4096 packs that a block's registers hold (a GPT-2 vocabulary) are read once.
    if constexpr (sizeof(T) == 2) {
      const int64_t packs = v / kVec;
      if (vec && packs > 4096 && packs <= int64_t{kRowThreads} * kRowPacks &&
          !kernel_paths::disabled(kernel_paths::kClassifierRows)) {
        classifier_fwd_rows_kernel<T><<<row_blocks(rows), kRowThreads, 0, launch_stream()>>>(
            static_cast<A*>(loss_rows.data_ptr()), g, x, static_cast<const int64_t*>(target.data_ptr()),
            static_cast<const A*>(scale.data_ptr()), row0, rows, v, ignore_index, rec, check);
        return;
      }
    }
    // Threads per row: as many as the row has packs, at most kMaxThreads.
    const int threads = threads_for(vec ? v / kVec : v);
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(rows), threads, 0, launch_stream()>>>(
          static_cast<A*>(loss_rows.data_ptr()), g, x, static_cast<const int64_t*>(target.data_ptr()),
          static_cast<const A*>(scale.data_ptr()), row0, rows, v, ignore_index, rec, check);
    };
    if (vec)
      launch(classifier_fwd_kernel<T, kVec>);
    else
      launch(classifier_fwd_kernel<T, 1>);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::LossKernels loss_kernels{
    .class_loss_fwd = {class_loss_fwd, backend::kFloating},
    .class_loss_bwd = {class_loss_bwd, backend::kFloating},
    .classifier_fwd = {classifier_fwd, backend::kFloating},
};

}  // namespace volt::cuda
