// CPU convolution (im2col + GEMM), f32 and f64. All tensors arrive contiguous (kernels/ops/conv_ops.cpp makes
// them so).
#include <vector>

#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cpu/gemm.h>

namespace volt::cpu {

namespace {

struct ConvGeom {
  int64_t n, c, h, w, oc, kh, kw, oh, ow;
  int64_t ckk() const { return c * kh * kw; }
  int64_t l() const { return oh * ow; }
};

ConvGeom conv_geom(const Tensor& x, const Tensor& weight, const Tensor& out) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3), out.size(2),
          out.size(3)};
}

// col (C*KH*KW, OH*OW) from one image (C, H, W); out-of-bounds taps read zero.
template <class T>
void im2col(const T* img, T* col, const ConvGeom& g, const Conv2dParams& p) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * g.l();
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          T* dst = row + oh * g.ow;
          if (ih < 0 || ih >= g.h) {
            for (int64_t ow = 0; ow < g.ow; ++ow) dst[ow] = T(0);
            continue;
          }
          const T* src = img + (c * g.h + ih) * g.w;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * p.stride_w - p.pad_w + kj * p.dil_w;
            dst[ow] = (iw >= 0 && iw < g.w) ? src[iw] : T(0);
          }
        }
      }
}

// The adjoint of im2col: img (C, H, W) += scatter of col.
template <class T>
void col2im(const T* col, T* img, const ConvGeom& g, const Conv2dParams& p) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * g.l();
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= g.h) continue;
          T* dst = img + (c * g.h + ih) * g.w;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * p.stride_w - p.pad_w + kj * p.dil_w;
            if (iw >= 0 && iw < g.w) dst[iw] += row[oh * g.ow + ow];
          }
        }
      }
}

GemmDesc row_major(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double beta) {
  GemmDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_a = ta;
  d.trans_b = tb;
  d.lda = ta ? m : k;
  d.ldb = tb ? k : n;
  d.ldc = n;
  d.beta = beta;
  return d;
}


void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  const ConvGeom g = conv_geom(x, weight, out);
  dispatch_f32_f64(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> col(static_cast<size_t>(g.ckk() * g.l()));
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = static_cast<const T*>(weight.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const T* bp = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    for (int64_t n = 0; n < g.n; ++n) {
      T* o = op + n * g.oc * g.l();
      if (bp)
        for (int64_t oc = 0; oc < g.oc; ++oc)
          for (int64_t i = 0; i < g.l(); ++i) o[oc * g.l() + i] = bp[oc];
      im2col(xp + n * g.c * g.h * g.w, col.data(), g, p);
      // out[n] (OC, L) = W (OC, CKK) @ col (CKK, L)
      gemm_ptr(row_major(g.oc, g.l(), g.ckk(), false, false, bp ? 1.0 : 0.0), x.dtype(), wp, col.data(), o);
    }
  });
}

void conv2d_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                     const Tensor& weight, const Conv2dParams& p) {
  const ConvGeom g = conv_geom(x, weight, grad_out);
  dispatch_f32_f64(x.dtype(), "conv2d backward", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> col(static_cast<size_t>(g.ckk() * g.l()));
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = static_cast<const T*>(weight.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    T* gx = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    T* gw = grad_weight.defined() ? static_cast<T*>(grad_weight.data_ptr()) : nullptr;
    if (gx)
      for (int64_t i = 0; i < grad_x.numel(); ++i) gx[i] = T(0);
    if (gw && g.n == 0)
      for (int64_t i = 0; i < grad_weight.numel(); ++i) gw[i] = T(0);
    for (int64_t n = 0; n < g.n; ++n) {
      const T* go = gp + n * g.oc * g.l();
      if (gw) {
        im2col(xp + n * g.c * g.h * g.w, col.data(), g, p);
        // gW (OC, CKK) += gout[n] (OC, L) @ col^T (L, CKK)
        gemm_ptr(row_major(g.oc, g.ckk(), g.l(), false, true, n > 0 ? 1.0 : 0.0), x.dtype(), go, col.data(), gw);
      }
      if (gx) {
        // gcol (CKK, L) = W^T (CKK, OC) @ gout[n] (OC, L), scattered back onto the image
        gemm_ptr(row_major(g.ckk(), g.l(), g.oc, true, false, 0.0), x.dtype(), wp, go, col.data());
        col2im(col.data(), gx + n * g.c * g.h * g.w, g, p);
      }
    }
  });
}

}  // namespace

constexpr backend::ConvKernels conv_kernels{
    .conv2d_forward = {conv2d_forward, backend::kF32F64},
    .conv2d_backward = {conv2d_backward, backend::kF32F64},
};

}  // namespace volt::cpu
