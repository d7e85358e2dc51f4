// CPU convolution (im2col + GEMM), f32 and f64. All tensors arrive contiguous (kernels/ops/conv_ops.cpp makes
// them so).
//
// The batch is processed in chunks of `nb` samples whose patch matrices sit side by side in one column buffer
// col (C*KH*KW, nb*L), L = OH*OW: one GEMM per chunk for each of the three products, wide enough for the BLAS
// kernels to run near their peak even where a deep layer's L is 16 or 64 (a GEMM per sample would be 16 columns
// wide). Chunks hold about kChunkColumns columns (a 32x32 layer: one sample per chunk). A 1x1 convolution with
// stride 1 and no padding reads its input directly (the patch matrix is the image). im2col/col2im copy whole
// runs of valid taps (memcpy for stride 1) instead of testing every tap, or, for outputs narrower than
// kRowCopyMin, gather through a table of tap offsets. The data gradient of a stride-1 convolution runs as a
// forward convolution of the output gradient (data_grad_as_conv); other strides use col2im. Measured against
// PyTorch by benchmarks/conv_cpu_vs_torch.sh (docs/benchmarks.md).
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cpu/gemm.h>

namespace volt::cpu {

namespace {

// Columns (samples x output positions) per GEMM: above ~512 the BLAS kernels are at their peak; the buffers of a
// chunk stay within a few MB.
constexpr int64_t kChunkColumns = 1024;

struct ConvGeom {
  int64_t n, c, h, w, oc, kh, kw, oh, ow;
  int64_t ckk() const { return c * kh * kw; }
  int64_t l() const { return oh * ow; }
  int64_t hw() const { return h * w; }
};

ConvGeom conv_geom(const Tensor& x, const Tensor& weight, const Tensor& out) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3), out.size(2),
          out.size(3)};
}

// A 1x1 convolution with stride 1 and no padding: the patch matrix of an image (C, H, W) is the image (C, H*W).
bool is_pointwise(const ConvGeom& g, const Conv2dParams& p) {
  return g.kh == 1 && g.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}

// The output columns [lo, hi) whose input column ow * stride - pad + kj * dil lies in [0, W).
struct Span {
  int64_t lo, hi, off;  // off: the input column of output column 0 (may be negative)
};
Span valid_span(int64_t kj, int64_t stride, int64_t pad, int64_t dil, int64_t in, int64_t out) {
  const int64_t off = kj * dil - pad;
  // ow * stride + off >= 0  <=>  ow >= ceil(-off / stride)
  int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  // ow * stride + off <= in - 1  <=>  ow <= floor((in - 1 - off) / stride)
  int64_t hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / stride + 1;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi, off};
}

// col rows (C*KH*KW) of row stride ld, columns [0, L) from one image (C, H, W); out-of-bounds taps read zero.
template <class T>
void im2col(const T* img, T* col, int64_t ld, const ConvGeom& g, const Conv2dParams& p) {
  for (int64_t kj = 0; kj < g.kw; ++kj) {
    const Span s = valid_span(kj, p.stride_w, p.pad_w, p.dil_w, g.w, g.ow);
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          T* dst = row + oh * g.ow;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.ow, T(0));
            continue;
          }
          const T* src = img + (c * g.h + ih) * g.w + s.off;
          std::fill(dst, dst + s.lo, T(0));
          if (p.stride_w == 1) {
            std::memcpy(dst + s.lo, src + s.lo, static_cast<size_t>(s.hi - s.lo) * sizeof(T));
          } else {
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow] = src[ow * p.stride_w];
          }
          std::fill(dst + s.hi, dst + g.ow, T(0));
        }
      }
  }
}

// Small outputs (OW < kRowCopyMin) copy rows of a few values, where the calls per row cost more than the copy:
// there im2col/col2im go through a table of each tap's input offset within a channel plane (-1: padding),
// (KH*KW, L), built once per call.
constexpr int64_t kRowCopyMin = 16;

std::vector<int32_t> tap_table(const ConvGeom& g, const Conv2dParams& p) {
  std::vector<int32_t> tab(static_cast<size_t>(g.kh * g.kw * g.l()));
  int32_t* t = tab.data();
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h, iw = ow * p.stride_w - p.pad_w + kj * p.dil_w;
          *t++ = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? static_cast<int32_t>(ih * g.w + iw) : -1;
        }
  return tab;
}

// dst[l] = src[tab[l]] where tab[l] >= 0, else 0, for l in [0, n).
template <class T>
inline void gather_taps(const T* __restrict src, const int32_t* __restrict tab, T* __restrict dst, int64_t n) {
  int64_t l = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i zero = _mm256_setzero_si256();
    for (; l + 8 <= n; l += 8) {
      const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + l));
      const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)));
      const __m256i safe = _mm256_max_epi32(idx, zero);
      _mm256_storeu_ps(dst + l, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src, safe, valid, 4));
    }
  }
#endif
  for (; l < n; ++l) {
    const int32_t o = tab[l];
    const T v = src[o < 0 ? 0 : o];
    dst[l] = o < 0 ? T(0) : v;
  }
}

template <class T>
void im2col_table(const T* img, T* col, int64_t ld, const ConvGeom& g, const int32_t* tab) {
  const int64_t taps = g.kh * g.kw, L = g.l(), hw = g.hw();
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t t = 0; t < taps; ++t) gather_taps(img + c * hw, tab + t * L, col + (c * taps + t) * ld, L);
}

template <class T>
void col2im_table(const T* col, int64_t ld, T* img, const ConvGeom& g, const int32_t* tab) {
  const int64_t taps = g.kh * g.kw, L = g.l(), hw = g.hw();
  for (int64_t c = 0; c < g.c; ++c) {
    T* dst = img + c * hw;
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t* tt = tab + t * L;
      const T* src = col + (c * taps + t) * ld;
      for (int64_t l = 0; l < L; ++l)
        if (tt[l] >= 0) dst[tt[l]] += src[l];
    }
  }
}

// The adjoint of im2col: img (C, H, W) += scatter of col (rows of stride ld).
template <class T>
void col2im(const T* col, int64_t ld, T* img, const ConvGeom& g, const Conv2dParams& p) {
  for (int64_t kj = 0; kj < g.kw; ++kj) {
    const Span s = valid_span(kj, p.stride_w, p.pad_w, p.dil_w, g.w, g.ow);
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= g.h) continue;
          T* dst = img + (c * g.h + ih) * g.w + s.off;
          const T* src = row + oh * g.ow;
          if (p.stride_w == 1) {
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow] += src[ow];
          } else {
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow * p.stride_w] += src[ow];
          }
        }
      }
  }
}

GemmDesc row_major(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double beta, int64_t lda, int64_t ldb,
                   int64_t ldc) {
  GemmDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_a = ta;
  d.trans_b = tb;
  d.lda = lda;
  d.ldb = ldb;
  d.ldc = ldc;
  d.beta = beta;
  return d;
}

// A per-thread buffer of n elements, neither zero-filled nor (up to kKeepBytes) freed between calls: a buffer
// allocated in each call would fault in and zero its pages every time, megabytes per layer. Larger ones (big
// images) are freed when the Scratch goes, as the caller's memory should not stay held.
constexpr int64_t kKeepBytes = int64_t{32} << 20;
template <class T, int Slot>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    thread_local std::unique_ptr<T[]> kept;
    thread_local int64_t kept_size = 0;
    if (n * static_cast<int64_t>(sizeof(T)) > kKeepBytes) {
      own_.reset(new T[static_cast<size_t>(n)]);  // default-initialised: no zero fill
      ptr_ = own_.get();
      return;
    }
    if (n > kept_size) {
      kept.reset(new T[static_cast<size_t>(n)]);
      kept_size = n;
    }
    ptr_ = kept.get();
  }
  T* get() const { return ptr_; }

 private:
  std::unique_ptr<T[]> own_;
  T* ptr_ = nullptr;
};

int64_t chunk_samples(const ConvGeom& g) {
  return std::clamp<int64_t>((kChunkColumns + g.l() - 1) / std::max<int64_t>(g.l(), 1), 1, std::max<int64_t>(g.n, 1));
}

// The patch matrix of samples [n0, n0 + nb) as (CKK, nb*L) with row stride ld = nb*L: a pointer into x when one
// pointwise sample needs no copy, else filled into buf (CKK * nb * L elements). tab: tap_table's, or null.
template <class T>
const T* patches(const T* xp, int64_t n0, int64_t nb, const ConvGeom& g, const Conv2dParams& p, T* buf,
                 const int32_t* tab) {
  const int64_t ld = nb * g.l();
  if (is_pointwise(g, p) && nb == 1) return xp + n0 * g.c * g.hw();
  for (int64_t j = 0; j < nb; ++j) {
    const T* img = xp + (n0 + j) * g.c * g.hw();
    if (is_pointwise(g, p)) {
      for (int64_t c = 0; c < g.c; ++c)
        std::memcpy(buf + c * ld + j * g.l(), img + c * g.hw(), static_cast<size_t>(g.l()) * sizeof(T));
    } else {
      if (tab) im2col_table(img, buf + j * g.l(), ld, g, tab);
      else im2col(img, buf + j * g.l(), ld, g, p);
    }
  }
  return buf;
}

// out (N, OC, OH, OW) = conv(x, w) + bias (bp may be null).
template <class T>
void forward_impl(const T* xp, const T* wp, const T* bp, T* op, const ConvGeom& g, const Conv2dParams& p, DType dt) {
  const int64_t L = g.l(), nb_max = chunk_samples(g);
  const bool direct = is_pointwise(g, p) && nb_max == 1;  // patches() reads x itself
  Scratch<T, 0> col(direct ? 0 : g.ckk() * nb_max * L);
  Scratch<T, 1> tmp_buf(nb_max > 1 ? g.oc * nb_max * L : 0);
  const std::vector<int32_t> tab = !is_pointwise(g, p) && g.ow < kRowCopyMin ? tap_table(g, p) : std::vector<int32_t>();
  const int32_t* tab_ptr = tab.empty() ? nullptr : tab.data();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, g.n - n0), ld = nb * L;
    const T* cp = patches(xp, n0, nb, g, p, col.get(), tab_ptr);
    T* o = op + n0 * g.oc * L;
    if (nb == 1) {
      // out[n] (OC, L) = W (OC, CKK) @ col (CKK, L) (+ bias, written first)
      if (bp)
        for (int64_t oc = 0; oc < g.oc; ++oc) std::fill(o + oc * L, o + (oc + 1) * L, bp[oc]);
      gemm_ptr(row_major(g.oc, L, g.ckk(), false, false, bp ? 1.0 : 0.0, g.ckk(), ld, L), dt, wp, cp, o);
      continue;
    }
    // tmp (OC, nb*L) = W @ col, then out[n0 + j] (OC, L) = tmp[:, j*L : (j+1)*L] + bias
    T* tmp = tmp_buf.get();
    gemm_ptr(row_major(g.oc, ld, g.ckk(), false, false, 0.0, g.ckk(), ld, ld), dt, wp, cp, tmp);
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t oc = 0; oc < g.oc; ++oc) {
        const T* src = tmp + oc * ld + j * L;
        T* dst = o + (j * g.oc + oc) * L;
        if (bp) {
          const T b = bp[oc];
          for (int64_t i = 0; i < L; ++i) dst[i] = src[i] + b;
        } else {
          std::memcpy(dst, src, static_cast<size_t>(L) * sizeof(T));
        }
      }
  }
}

void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  const ConvGeom g = conv_geom(x, weight, out);
  if (g.n == 0 || g.oc == 0 || g.l() == 0) return;
  dispatch_f32_f64(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    forward_impl(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(weight.data_ptr()),
                 bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr, static_cast<T*>(out.data_ptr()), g,
                 p, x.dtype());
  });
}

// A stride-1 convolution's data gradient is itself a convolution: of the output gradient (OC channels, OH x OW)
// with the weights transposed to (C, OC) and flipped, dilated as the forward, padded by dil*(k-1) - pad. Run as
// one (im2col + GEMM writing grad_x directly), it replaces the GEMM into a patch-sized buffer (K = OC), the
// zero-fill and the scatter-add of col2im.
bool data_grad_as_conv(const ConvGeom& g, const Conv2dParams& p) {
  return p.stride_h == 1 && p.stride_w == 1 && p.pad_h <= p.dil_h * (g.kh - 1) && p.pad_w <= p.dil_w * (g.kw - 1);
}

void conv2d_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                     const Tensor& weight, const Conv2dParams& p) {
  const ConvGeom g = conv_geom(x, weight, grad_out);
  dispatch_f32_f64(x.dtype(), "conv2d backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = static_cast<const T*>(weight.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    T* gx = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    T* gw = grad_weight.defined() ? static_cast<T*>(grad_weight.data_ptr()) : nullptr;
    const int64_t L = g.l();
    if (g.n == 0 || g.oc == 0 || L == 0) {  // empty sums
      if (gx) std::fill(gx, gx + grad_x.numel(), T(0));
      if (gw) std::fill(gw, gw + grad_weight.numel(), T(0));
      return;
    }
    const bool pointwise = is_pointwise(g, p);
    // grad_x as a convolution of grad_out (below, after the loop), or in the loop through col2im
    T* const gx_as_conv = gx && !pointwise && data_grad_as_conv(g, p) ? gx : nullptr;
    if (gx_as_conv) gx = nullptr;
    if (gw || gx) {
      const int64_t nb_max = chunk_samples(g);
      Scratch<T, 0> col(gw && !(pointwise && nb_max == 1) ? g.ckk() * nb_max * L : 0);
      Scratch<T, 1> got_buf(nb_max > 1 ? g.oc * nb_max * L : 0);
      Scratch<T, 2> gcol_buf(gx ? g.ckk() * nb_max * L : 0);
      const std::vector<int32_t> tab = !pointwise && g.ow < kRowCopyMin ? tap_table(g, p) : std::vector<int32_t>();
      const int32_t* tab_ptr = tab.empty() ? nullptr : tab.data();
      for (int64_t n0 = 0; n0 < g.n; n0 += nb_max) {
        const int64_t nb = std::min(nb_max, g.n - n0), ld = nb * L;
        // The chunk's output gradient as (OC, nb*L): grad_out[n0] itself for one sample, else gathered.
        const T* go = gp + n0 * g.oc * L;
        if (nb > 1) {
          T* got = got_buf.get();
          for (int64_t j = 0; j < nb; ++j)
            for (int64_t oc = 0; oc < g.oc; ++oc)
              std::memcpy(got + oc * ld + j * L, go + (j * g.oc + oc) * L, static_cast<size_t>(L) * sizeof(T));
          go = got;
        }
        if (gw) {
          // gW (OC, CKK) (+)= gout (OC, nb*L) @ col^T (nb*L, CKK)
          const T* cp = patches(xp, n0, nb, g, p, col.get(), tab_ptr);
          gemm_ptr(row_major(g.oc, g.ckk(), ld, false, true, n0 > 0 ? 1.0 : 0.0, ld, ld, g.ckk()), x.dtype(), go,
                   cp, gw);
        }
        if (gx) {
          T* gxn = gx + n0 * g.c * g.hw();
          // gcol (CKK, nb*L) = W^T (CKK, OC) @ gout (OC, nb*L), scattered back onto the images
          if (pointwise && nb == 1) {
            gemm_ptr(row_major(g.ckk(), ld, g.oc, true, false, 0.0, g.ckk(), ld, ld), x.dtype(), wp, go, gxn);
            continue;
          }
          T* gcol = gcol_buf.get();
          gemm_ptr(row_major(g.ckk(), ld, g.oc, true, false, 0.0, g.ckk(), ld, ld), x.dtype(), wp, go, gcol);
          for (int64_t j = 0; j < nb; ++j) {
            T* img = gxn + j * g.c * g.hw();
            if (pointwise) {
              for (int64_t c = 0; c < g.c; ++c)
                std::memcpy(img + c * g.hw(), gcol + c * ld + j * L, static_cast<size_t>(L) * sizeof(T));
            } else {
              std::fill(img, img + g.c * g.hw(), T(0));
              if (tab_ptr) col2im_table(gcol + j * L, ld, img, g, tab_ptr);
              else col2im(gcol + j * L, ld, img, g, p);
            }
          }
        }
      }
    }  // the loop's scratch buffers are released to forward_impl here
    if (gx_as_conv) {
      // w2 (C, OC, KH, KW) = W (OC, C, KH, KW) transposed and flipped
      const int64_t kk = g.kh * g.kw;
      std::unique_ptr<T[]> w2(new T[static_cast<size_t>(g.c * g.oc * kk)]);
      for (int64_t oc = 0; oc < g.oc; ++oc)
        for (int64_t c = 0; c < g.c; ++c)
          for (int64_t t = 0; t < kk; ++t) w2[static_cast<size_t>((c * g.oc + oc) * kk + t)] = wp[(oc * g.c + c) * kk + kk - 1 - t];
      const ConvGeom g2{g.n, g.oc, g.oh, g.ow, g.c, g.kh, g.kw, g.h, g.w};
      const Conv2dParams p2{1, 1, p.dil_h * (g.kh - 1) - p.pad_h, p.dil_w * (g.kw - 1) - p.pad_w, p.dil_h, p.dil_w};
      forward_impl<T>(gp, w2.get(), nullptr, gx_as_conv, g2, p2, x.dtype());
    }
  });
}

}  // namespace

constexpr backend::ConvKernels conv_kernels{
    .conv2d_forward = {conv2d_forward, backend::kF32F64},
    .conv2d_backward = {conv2d_backward, backend::kF32F64},
};

}  // namespace volt::cpu
