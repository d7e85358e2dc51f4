// CUDA layer_norm / group_norm and the fused residual_layer_norm. The math is kernels/common/norm.h and
// kernels/common/fused.h; this file holds indexing and launches only. y and its gradient are of element type Y:
// x's, or f16/bf16 for f32 x (kernels/common/norm_out.h).
// Layouts and contracts are in kernels/backend/norm.h.
#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/common/fused.h>
#include <volt/kernels/common/norm_out.h>
#include <volt/kernels/cuda/col_reduce.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/cuda/row_blocks.cuh>
#include <volt/kernels/cuda/warp_rows.cuh>

namespace volt::cuda {

namespace {

using rows::kMaxRowBlocks;
using rows::kMaxThreads;
using rows::row_blocks;
using rows::threads_for;

// Block-wide reductions in a fixed order: a shuffle tree inside each warp, then warp 0 over the warps' results
// (two barriers, where a shared-memory tree over the block took log2(blockDim) of them). blockDim.x is a power of two
// in [32, kMaxThreads] (threads_for), so every warp is full.
template <class A>
__device__ void warp_welford(normmath::Welford<A>& st) {
  for (int o = 16; o > 0; o >>= 1) {
    normmath::Welford<A> other;
    other.mean = __shfl_down_sync(0xffffffffu, st.mean, o);
    other.m2 = __shfl_down_sync(0xffffffffu, st.m2, o);
    other.n = __shfl_down_sync(0xffffffffu, st.n, o);
    normmath::welford_merge(st, other);
  }
}

// Every thread gets the row's merged Welford state.
template <class A>
__device__ void block_welford(normmath::Welford<A>& st) {
  __shared__ normmath::Welford<A> sh[kMaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_welford(st);
  if (lane == 0) sh[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = lane < int(blockDim.x >> 5) ? sh[lane] : normmath::welford_init<A>();
    warp_welford(st);
    if (lane == 0) sh[0] = st;
  }
  __syncthreads();
  st = sh[0];
  __syncthreads();  // sh is rewritten by the next row
}

template <class A>
__device__ void warp_sum2(A& a, A& b) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
}

// Block-wide sums of two values; every thread gets both.
template <class A>
__device__ void block_sum2(A& a, A& b) {
  __shared__ A sa[kMaxThreads / 32], sb[kMaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_sum2(a, b);
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    const bool live = lane < int(blockDim.x >> 5);
    a = live ? sa[lane] : A(0);
    b = live ? sb[lane] : A(0);
    warp_sum2(a, b);
    if (lane == 0) {
      sa[0] = a;
      sb[0] = b;
    }
  }
  __syncthreads();
  a = sa[0];
  b = sb[0];
  __syncthreads();  // sa and sb are rewritten by the next row
}

// One block per row: statistics, then the normalised and affine-transformed row.
template <class T, class Y>
__global__ void norm_fwd_kernel(const T* x, Y* y, acc_t<T>* mean, acc_t<T>* rstd, const acc_t<T>* w,
                                const acc_t<T>* b, NormGeom g, acc_t<T> eps) {
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
    const T* xr = x + r * g.row_size;
    Y* yr = y + r * g.row_size;
    normmath::Welford<A> st = normmath::welford_init<A>();
    for (int64_t j = threadIdx.x; j < g.row_size; j += blockDim.x) normmath::welford_push(st, A(xr[j]));
    block_welford(st);
    const A m = st.mean, rs = normmath::welford_rstd(st, eps);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < g.row_size; j += blockDim.x) {
      const int64_t k = g.param_index(r, j);
      yr[j] = Y(normmath::norm_forward(A(xr[j]), m, rs, w ? w[k] : A(1), b ? b[k] : A(0)));
    }
  }
}

// One block per row: the row sums of dy * w and dy * w * xhat, then dx.
template <class T, class Y>
__global__ void norm_bwd_dx_kernel(T* gx, const Y* gy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                                   const acc_t<T>* w, NormGeom g) {
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
    const T* xr = x + r * g.row_size;
    const Y* gr = gy + r * g.row_size;
    T* gxr = gx + r * g.row_size;
    const A m = mean[r], rs = rstd[r];
    A sg = A(0), sgx = A(0);
    for (int64_t j = threadIdx.x; j < g.row_size; j += blockDim.x) {
      const A gw = A(gr[j]) * (w ? w[g.param_index(r, j)] : A(1));
      sg += gw;
      sgx += gw * normmath::norm_xhat(A(xr[j]), m, rs);
    }
    block_sum2(sg, sgx);
    const A n = A(g.row_size), mg = sg / n, mgx = sgx / n;
    for (int64_t j = threadIdx.x; j < g.row_size; j += blockDim.x) {
      const A gw = A(gr[j]) * (w ? w[g.param_index(r, j)] : A(1));
      gxr[j] = T(normmath::norm_backward_dx(gw, normmath::norm_xhat(A(xr[j]), m, rs), rs, mg, mgx));
    }
  }
}

// Parameter gradients when inner == 1 (layer_norm; group_norm of (N, C) input): parameter k sums the column of
// element k % cpg over the rows of its group, as a column reduction (kernels/cuda/col_reduce.cuh: split over row
// ranges when one block per 32 parameters would leave the GPU idle, as layer_norm over (16384, 768) did with 24
// blocks). Value 0 is dw's, value 1 db's.
template <class T, class Y>
struct NormParamGradLoad {
  const Y* gy;
  const T* x;
  const acc_t<T>* mean;
  const acc_t<T>* rstd;
  NormGeom g;
  int64_t cpg;
  __device__ void operator()(int64_t n, int64_t k, acc_t<T>* acc) const {
    using A = acc_t<T>;
    const int64_t r = n * g.groups + k / cpg, idx = r * g.row_size + k % cpg;
    const A dy = A(gy[idx]);
    acc[0] += dy * normmath::norm_xhat(A(x[idx]), mean[r], rstd[r]);
    acc[1] += dy;
  }
};
template <class A>
struct NormParamGradStore {
  A* dw;
  A* db;
  __device__ void operator()(int64_t k, int v, A s) const {
    if (v == 0 && dw) dw[k] = s;
    if (v == 1 && db) db[k] = s;
  }
};

// Parameter gradients when inner > 1 (group_norm over spatial dims): one block per parameter (channel) k,
// threads over its (sample, spatial) elements, which are runs of `inner` consecutive values.
template <class T>
__global__ void norm_param_grad_channels_kernel(acc_t<T>* dw, acc_t<T>* db, const T* gy, const T* x,
                                                const acc_t<T>* mean, const acc_t<T>* rstd, NormGeom g) {
  using A = acc_t<T>;
  const int64_t cpg = g.channels_per_group(), per_group = g.rows / g.groups;
  for (int64_t k = blockIdx.x; k < g.num_params(); k += gridDim.x) {
    const int64_t grp = k / cpg, c = k % cpg;
    A aw = A(0), ab = A(0);
    for (int64_t e = threadIdx.x; e < per_group * g.inner; e += blockDim.x) {
      const int64_t n = e / g.inner, s = e % g.inner;
      const int64_t r = n * g.groups + grp, idx = r * g.row_size + c * g.inner + s;
      const A dy = A(gy[idx]);
      aw += dy * normmath::norm_xhat(A(x[idx]), mean[r], rstd[r]);
      ab += dy;
    }
    block_sum2(aw, ab);
    if (threadIdx.x == 0) {
      if (dw) dw[k] = aw;
      if (db) db[k] = ab;
    }
  }
}

// s = x + r (r in T, or in Y's half type for f32 x), its statistics, then y. Each thread reads back only the
// elements of s it wrote itself.
template <class T, class Y, class R>
__global__ void residual_norm_fwd_kernel(const T* x, const R* r, T* s, Y* y, acc_t<T>* mean, acc_t<T>* rstd,
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
      y[o + j] = Y(normmath::norm_forward(A(s[o + j]), m, rs, w ? w[j] : A(1), b ? b[j] : A(0)));
  }
}

// The row sums of dy * w and dy * w * xhat, then grad_s = dx + grad_s_other, and with gr, r's gradient in Y.
template <class T, class Y>
__global__ void residual_norm_bwd_kernel(T* gs, Y* gr, const Y* gy, const T* go, const T* s, const acc_t<T>* mean,
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
    block_sum2(sg, sgx);
    const A mg = sg / A(n), mgx = sgx / A(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A gw = A(gy[o + j]) * (w ? w[j] : A(1));
      const A xh = normmath::norm_xhat(A(s[o + j]), m, rs);
      const T v = T(fusedmath::residual_norm_grad_s(gw, xh, rs, mg, mgx, go ? A(go[o + j]) : A(0)));
      gs[o + j] = v;
      if (gr) gr[o + j] = Y(v);  // as a cast of grad_s rounds it
    }
  }
}

// ---- Warp-per-row kernels (warp_rows.cuh) for layer_norm rows that fit a warp's registers: each row is read
// once, in 16-byte packs, where the block kernels above read it twice in 2- or 4-byte loads. The per-element math
// is the block kernels'; only the order of the row's sums differs (each lane's share in two passes, then a warp
// tree), so results agree to rounding. Used when groups == 1 and inner == 1 (element j uses parameter j).

// The row's statistics from the lanes' shares: each lane's state (normmath::welford_of), merged over the warp,
// then lane 0's given to every lane.
template <class T, int K>
__device__ normmath::Welford<float> warp_row_welford(const warp_rows::LaneRow<T, K>& c) {
  constexpr int kMax = K * Pack<T>::kLen;
  normmath::Welford<float> st = normmath::welford_of<kMax, float>(c.count(), [&](int i) { return c.at(i); });
  warp_welford(st);
  st.mean = __shfl_sync(0xffffffffu, st.mean, 0);
  st.m2 = __shfl_sync(0xffffffffu, st.m2, 0);
  st.n = __shfl_sync(0xffffffffu, st.n, 0);
  return st;
}

// layer_norm forward of x, or with `res`, the fused residual_layer_norm forward: s = x + res (written to s; res in
// T, or in Y's half type for f32 x), then y = norm(s), in Y. K packs per lane.
template <class T, class Y, class R, int K>
__global__ void norm_fwd_warp_kernel(const T* x, const R* res, T* s, Y* y, float* mean, float* rstd, const float* w,
                                     const float* b, int64_t rows, int64_t n, float eps) {
  using P = Pack<T>;
  using PY = Pack<Y, P::kLen>;  // y's values of one pack of x
  using PR = Pack<R, P::kLen>;  // res's values of one pack of x
  const int lane = threadIdx.x & 31;
  for (int64_t r = warp_rows::first_row(); r < rows; r += warp_rows::row_stride()) {
    const int64_t o = r * n;
    warp_rows::LaneRow<T, K> c;
    c.load(x + o, n, lane);
    if (res != nullptr) {
      warp_rows::for_each_pack<K, P::kLen>(n, lane, [&](int k, int64_t j) {
        const PR rp = load_pack<R, P::kLen>(res + o + j);
#pragma unroll
        for (int i = 0; i < P::kLen; ++i) c.p[k].v[i] = fusedmath::residual_add<T, float>(c.p[k].v[i], rp.v[i]);
        store_pack(s + o + j, c.p[k]);
      });
    }
    const normmath::Welford<float> st = warp_row_welford(c);
    const float m = st.mean, rs = normmath::welford_rstd(st, eps);
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    warp_rows::for_each_pack<K, P::kLen>(n, lane, [&](int k, int64_t j) {
      const auto wp = warp_rows::param_pack<P::kLen>(w, j, 1.f), bp = warp_rows::param_pack<P::kLen>(b, j, 0.f);
      PY out;
#pragma unroll
      for (int i = 0; i < P::kLen; ++i)
        out.v[i] = Y(normmath::norm_forward(float(c.p[k].v[i]), m, rs, wp.v[i], bp.v[i]));
      store_pack(y + o + j, out);
    });
  }
}

// layer_norm's dx of the normalised x (saved mean and rstd) from gy in Y, or with `go`, residual_layer_norm's
// grad_s: dx plus go, the gradient of s's other uses; with gr, also that gradient rounded to Y (the gradient of a
// residual stored in Y's half type). K packs per lane.
template <class T, class Y, int K>
__global__ void norm_bwd_warp_kernel(T* gx, Y* gr, const Y* gy, const T* go, const T* x, const float* mean,
                                     const float* rstd, const float* w, int64_t rows, int64_t n) {
  using P = Pack<T>;
  using PY = Pack<Y, P::kLen>;
  const int lane = threadIdx.x & 31;
  for (int64_t r = warp_rows::first_row(); r < rows; r += warp_rows::row_stride()) {
    const int64_t o = r * n;
    warp_rows::LaneRow<T, K> xc;
    warp_rows::LaneRow<Y, K, P::kLen> gc;
    xc.load(x + o, n, lane);
    gc.load(gy + o, n, lane);
    const float m = mean[r], rs = rstd[r];
    float sg = 0.f, sgx = 0.f;
    warp_rows::for_each_pack<K, P::kLen>(n, lane, [&](int k, int64_t j) {
      const auto wp = warp_rows::param_pack<P::kLen>(w, j, 1.f);
#pragma unroll
      for (int i = 0; i < P::kLen; ++i) {
        const float gw = float(gc.p[k].v[i]) * wp.v[i];
        sg += gw;
        sgx += gw * normmath::norm_xhat(float(xc.p[k].v[i]), m, rs);
      }
    });
    warp_rows::warp_allsum2(sg, sgx);
    const float mg = sg / float(n), mgx = sgx / float(n);
    warp_rows::for_each_pack<K, P::kLen>(n, lane, [&](int k, int64_t j) {
      P other;
      if (go != nullptr) other = load_pack(go + o + j);
      const auto wp = warp_rows::param_pack<P::kLen>(w, j, 1.f);
      P out;
#pragma unroll
      for (int i = 0; i < P::kLen; ++i) {
        const float gw = float(gc.p[k].v[i]) * wp.v[i];
        const float xh = normmath::norm_xhat(float(xc.p[k].v[i]), m, rs);
        out.v[i] = T(go != nullptr ? fusedmath::residual_norm_grad_s(gw, xh, rs, mg, mgx, float(other.v[i]))
                                   : normmath::norm_backward_dx(gw, xh, rs, mg, mgx));
      }
      store_pack(gx + o + j, out);
      if (gr != nullptr) {
        PY rout;
#pragma unroll
        for (int i = 0; i < P::kLen; ++i) rout.v[i] = Y(out.v[i]);  // as a cast of grad_s rounds it
        store_pack(gr + o + j, rout);
      }
    });
  }
}

// Launches the warp forward when layer_norm's rows qualify (warp_rows::packs_per_lane); false when they do not.
template <class T, class Y, class R = T>
bool norm_fwd_warp(const T* x, const R* res, T* s, Y* y, void* mean, void* rstd, const Tensor& weight,
                   const Tensor& bias, const NormGeom& g, double eps) {
  if constexpr (!std::is_same_v<acc_t<T>, float>) {
    return false;
  } else {
    if (g.groups != 1 || g.inner != 1 || kernel_paths::disabled(kernel_paths::kWarpNorm)) return false;
    const void* wp = weight.defined() ? weight.data_ptr() : nullptr;
    const void* bp = bias.defined() ? bias.data_ptr() : nullptr;
    return warp_rows::with_packs<T>(g.row_size, {x, res, s, y, wp, bp}, [&](auto k) {
      norm_fwd_warp_kernel<T, Y, R, decltype(k)::value>
          <<<warp_rows::blocks_for(g.rows), 32 * warp_rows::kWarpsPerBlock, 0, launch_stream()>>>(
              x, res, s, y, static_cast<float*>(mean), static_cast<float*>(rstd),
              weight.defined() ? static_cast<const float*>(weight.data_ptr()) : nullptr,
              bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr, g.rows, g.row_size, float(eps));
    });
  }
}

// Launches the warp backward when the rows qualify; false when they do not.
template <class T, class Y>
bool norm_bwd_warp(T* gx, Y* gr, const Y* gy, const T* go, const T* x, const void* mean, const void* rstd,
                   const Tensor& weight, const NormGeom& g) {
  if constexpr (!std::is_same_v<acc_t<T>, float>) {
    return false;
  } else {
    if (g.groups != 1 || g.inner != 1 || kernel_paths::disabled(kernel_paths::kWarpNorm)) return false;
    const void* wp = weight.defined() ? weight.data_ptr() : nullptr;
    return warp_rows::with_packs<T>(g.row_size, {gx, gr, gy, go, x, wp}, [&](auto k) {
      norm_bwd_warp_kernel<T, Y, decltype(k)::value>
          <<<warp_rows::blocks_for(g.rows), 32 * warp_rows::kWarpsPerBlock, 0, launch_stream()>>>(
              gx, gr, gy, go, x, static_cast<const float*>(mean), static_cast<const float*>(rstd),
              weight.defined() ? static_cast<const float*>(weight.data_ptr()) : nullptr, g.rows, g.row_size);
    });
  }
}

template <class A>
A* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<A*>(t.data_ptr()) : nullptr; }


void norm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
              const Tensor& bias, const NormGeom& g, double eps) {
  dispatch_norm(x.dtype(), out.dtype(), "norm_fwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    Y* yp = static_cast<Y*>(out.data_ptr());
    if (norm_fwd_warp<T, Y, T>(xp, nullptr, nullptr, yp, mean.data_ptr(), rstd.data_ptr(), weight, bias, g, eps))
      return;
    norm_fwd_kernel<T, Y><<<row_blocks(g.rows), threads_for(g.row_size), 0, launch_stream()>>>(
        xp, yp, static_cast<A*>(mean.data_ptr()), static_cast<A*>(rstd.data_ptr()), ptr_or_null<const A>(weight),
        ptr_or_null<const A>(bias), g, A(eps));
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void norm_bwd(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
              const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g) {
  cudaStream_t st = launch_stream();
  dispatch_norm(x.dtype(), grad_out.dtype(), "norm_bwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    const Y* gy = static_cast<const Y*>(grad_out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    if (grad_x.defined()) {
      T* gx = static_cast<T*>(grad_x.data_ptr());
      if (!norm_bwd_warp<T, Y>(gx, nullptr, gy, nullptr, xp, mp, rp, weight, g))
        norm_bwd_dx_kernel<T, Y><<<row_blocks(g.rows), threads_for(g.row_size), 0, st>>>(
            gx, gy, xp, mp, rp, ptr_or_null<const A>(weight), g);
      VOLT_CUDA_CHECK_LAUNCH();
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    A* dw = ptr_or_null<A>(grad_weight);
    A* db = ptr_or_null<A>(grad_bias);
    const int64_t P = g.num_params();
    if (g.inner == 1) {
      cols::reduce<A, 2>(NormParamGradLoad<T, Y>{gy, xp, mp, rp, g, g.channels_per_group()},
                         NormParamGradStore<A>{dw, db}, g.rows / g.groups, P, x.device());
      return;
    }
    if constexpr (std::is_same_v<T, Y>) {  // group_norm over spatial dims: y in x's dtype
      norm_param_grad_channels_kernel<T><<<row_blocks(P), threads_for((g.rows / g.groups) * g.inner), 0, st>>>(
          dw, db, gy, xp, mp, rp, g);
      VOLT_CUDA_CHECK_LAUNCH();
    } else {
      VOLT_FAIL("norm_bwd: a gradient in another dtype than x's is for layer_norm's geometry only (inner == 1)");
    }
  });
}

void residual_norm_fwd(const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& r, const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps) {
  dispatch_residual_norm(x.dtype(), y.dtype(), r.dtype(), "residual_norm_fwd", [&](auto tag, auto ytag, auto rtag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using R = decltype(rtag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const R* res = static_cast<const R*>(r.data_ptr());
    T* sp = static_cast<T*>(s.data_ptr());
    Y* yp = static_cast<Y*>(y.data_ptr());
    if (norm_fwd_warp<T, Y, R>(xp, res, sp, yp, mean.data_ptr(), rstd.data_ptr(), weight, bias, g, eps)) return;
    residual_norm_fwd_kernel<T, Y, R><<<row_blocks(g.rows), threads_for(g.row_size), 0, launch_stream()>>>(
        xp, res, sp, yp, static_cast<A*>(mean.data_ptr()), static_cast<A*>(rstd.data_ptr()),
        ptr_or_null<const A>(weight), ptr_or_null<const A>(bias), g, A(eps));
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

void residual_norm_bwd(const Tensor& grad_s, const Tensor& grad_r, const Tensor& grad_y, const Tensor& grad_s_other,
                       const Tensor& s, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                       const NormGeom& g) {
  dispatch_norm(s.dtype(), grad_y.dtype(), "residual_norm_bwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    T* gs = static_cast<T*>(grad_s.data_ptr());
    Y* gr = residual_grad_ptr<T, Y>(grad_r, grad_y.dtype(), s.dtype());  // r's gradient, when r is stored in Y
    const Y* gy = static_cast<const Y*>(grad_y.data_ptr());
    const T* go = grad_s_other.defined() ? static_cast<const T*>(grad_s_other.data_ptr()) : nullptr;
    const T* sp = static_cast<const T*>(s.data_ptr());
    if (norm_bwd_warp<T, Y>(gs, gr, gy, go, sp, mean.data_ptr(), rstd.data_ptr(), weight, g)) return;
    residual_norm_bwd_kernel<T, Y><<<row_blocks(g.rows), threads_for(g.row_size), 0, launch_stream()>>>(
        gs, gr, gy, go, sp, static_cast<const A*>(mean.data_ptr()), static_cast<const A*>(rstd.data_ptr()),
        ptr_or_null<const A>(weight), g);
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace

constexpr backend::NormKernels norm_kernels{
    .norm_fwd = {norm_fwd, backend::kFloating},
    .norm_bwd = {norm_bwd, backend::kFloating},
    .residual_norm_fwd = {residual_norm_fwd, backend::kFloating},
    .residual_norm_bwd = {residual_norm_bwd, backend::kFloating},
};

}  // namespace volt::cuda
