// CUDA fused ops (contracts in kernels/backend/fused.h; math in kernels/common/fused.h): one block per row, threads
// striding along it, rows striding over a capped grid. Indexing and launches only.
#include <limits>

#include <volt/kernels/backend/fused.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cuda/block_lse.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>

namespace volt::cuda {

namespace {

using rows::block_lse;
using rows::block_sum;
using rows::kMaxThreads;
using rows::row_blocks;
using rows::threads_for;

// Block-wide merge of the per-thread Welford states; every thread gets the row's state.
template <class A>
__device__ void block_welford(normmath::Welford<A>& st) {
  __shared__ normmath::Welford<A> sh[kMaxThreads];
  sh[threadIdx.x] = st;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      normmath::Welford<A> a = sh[threadIdx.x];
      normmath::welford_merge(a, sh[threadIdx.x + k]);
      sh[threadIdx.x] = a;
    }
    __syncthreads();
  }
  st = sh[0];
  __syncthreads();
}

// s = x + r, its statistics, then y. Each thread reads back only the elements of s it wrote itself.
template <class T>
__global__ void residual_norm_fwd_kernel(const T* x, const T* r, T* s, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                                         const acc_t<T>* w, const acc_t<T>* b, NormGeom g, acc_t<T> eps) {
  using A = acc_t<T>;
  const int64_t n = g.row_size;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const int64_t o = row * n;
    normmath::Welford<A> st = normmath::welford_init<A>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const T sj = fusedmath::residual_add<T, A>(x[o + j], r[o + j]);
      s[o + j] = sj;
      normmath::welford_push(st, A(sj));
    }
    block_welford(st);
    const A m = st.mean, rs = normmath::welford_rstd(st, eps);
    if (threadIdx.x == 0) {
      mean[row] = m;
      rstd[row] = rs;
    }
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      y[o + j] = T(normmath::norm_forward(A(s[o + j]), m, rs, w ? w[j] : A(1), b ? b[j] : A(0)));
  }
}

// The row sums of dy * w and dy * w * xhat, then grad_s = dx + grad_s_other.
template <class T>
__global__ void residual_norm_bwd_kernel(T* gs, const T* gy, const T* go, const T* s, const acc_t<T>* mean,
                                         const acc_t<T>* rstd, const acc_t<T>* w, NormGeom g) {
  using A = acc_t<T>;
  const int64_t n = g.row_size;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const int64_t o = row * n;
    const A m = mean[row], rs = rstd[row];
    A sg = A(0), sgx = A(0);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A gw = A(gy[o + j]) * (w ? w[j] : A(1));
      sg += gw;
      sgx += gw * normmath::norm_xhat(A(s[o + j]), m, rs);
    }
    sg = block_sum(sg);
    sgx = block_sum(sgx);
    const A mg = sg / A(n), mgx = sgx / A(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A gw = A(gy[o + j]) * (w ? w[j] : A(1));
      const A xh = normmath::norm_xhat(A(s[o + j]), m, rs);
      gs[o + j] = T(fusedmath::residual_norm_grad_s(gw, xh, rs, mg, mgx, go ? A(go[o + j]) : A(0)));
    }
  }
}

// One block per row of the chunk: the row's log-sum-exp, its loss, then its gradient over the same row (which may
// be the logits' own storage: every read of the row happens before the block's barrier inside block_lse).
template <class T>
__global__ void classifier_fwd_kernel(acc_t<T>* loss_rows, T* grad, const T* logits, const int64_t* target,
                                      const acc_t<T>* scale, int64_t row0, int64_t nrows, int64_t v,
                                      int64_t ignore_index) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x; i < nrows; i += gridDim.x) {
    const int64_t row = row0 + i, t = target[row];
    const T* x = logits + row * v;
    const bool ignored = t == ignore_index;
    // Out-of-range targets are not checked on the device (that would need a host sync); they give NaN.
    const bool bad = !ignored && (t < 0 || t >= v);
    A m = -std::numeric_limits<A>::infinity(), se = A(0);
    if (!ignored)
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) nnmath::lse_push(m, se, A(x[j]));
    block_lse(m, se);
    const A lse = nnmath::lse_finish(m, se);
    const A xt = ignored || bad ? A(0) : A(x[t]);
    __syncthreads();  // every thread has read x[t] before any thread overwrites the row
    if (threadIdx.x == 0) loss_rows[i] = ignored ? A(0) : (bad ? A(NAN) : fusedmath::classifier_row_loss(lse, xt));
    if (grad == nullptr) continue;
    const A sc = bad ? A(NAN) : *scale;
    T* gr = grad + row * v;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      gr[j] = ignored ? T(A(0)) : T(fusedmath::classifier_grad(A(x[j]), lse, j == t, sc));
  }
}

template <class P>
P* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<P*>(t.data_ptr()) : nullptr; }

void residual_norm_fwd(const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& r, const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps) {
  dispatch_floating(x.dtype(), "residual_norm_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    residual_norm_fwd_kernel<T><<<row_blocks(g.rows), threads_for(g.row_size), 0, compute_stream(x)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const T*>(r.data_ptr()), static_cast<T*>(s.data_ptr()),
        static_cast<T*>(y.data_ptr()), static_cast<A*>(mean.data_ptr()), static_cast<A*>(rstd.data_ptr()),
        ptr_or_null<const A>(weight), ptr_or_null<const A>(bias), g, A(eps));
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void residual_norm_bwd(const Tensor& grad_s, const Tensor& grad_y, const Tensor& grad_s_other, const Tensor& s,
                       const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g) {
  dispatch_floating(s.dtype(), "residual_norm_bwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    residual_norm_bwd_kernel<T><<<row_blocks(g.rows), threads_for(g.row_size), 0, compute_stream(s)>>>(
        static_cast<T*>(grad_s.data_ptr()), static_cast<const T*>(grad_y.data_ptr()),
        ptr_or_null<const T>(grad_s_other), static_cast<const T*>(s.data_ptr()),
        static_cast<const A*>(mean.data_ptr()), static_cast<const A*>(rstd.data_ptr()), ptr_or_null<const A>(weight),
        g);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void classifier_fwd(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
                    const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index) {
  if (rows == 0) return;
  dispatch_floating(logits.dtype(), "classifier_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    classifier_fwd_kernel<T><<<row_blocks(rows), threads_for(v), 0, compute_stream(logits)>>>(
        static_cast<A*>(loss_rows.data_ptr()), ptr_or_null<T>(grad), static_cast<const T*>(logits.data_ptr()),
        static_cast<const int64_t*>(target.data_ptr()), ptr_or_null<const A>(scale), row0, rows, v, ignore_index);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::FusedKernels fused_kernels{
    .residual_norm_fwd = {residual_norm_fwd, backend::kFloating},
    .residual_norm_bwd = {residual_norm_bwd, backend::kFloating},
    .classifier_fwd = {classifier_fwd, backend::kFloating},
};

}  // namespace volt::cuda
