// CPU convolution (im2col + GEMM), pooling and batch norm, for f32 and f64. Batch-norm statistics accumulate
// in double. All tensors arrive contiguous (kernels/ops/conv_ops.cpp makes them so).
#include <cmath>
#include <limits>
#include <vector>

#include <volt/kernels/cpu/linalg.h>

namespace volt::cpu {

namespace {

template <class F>
void dispatch_f32_f64(DType dt, const char* op, F&& f) {
  if (dt == DType::f32) return f(float{});
  if (dt == DType::f64) return f(double{});
  VOLT_FAIL(op, " (CPU): dtype ", dtype_name(dt), " is not supported; expected float32 or float64");
}

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

}  // namespace

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

// ---- pooling ------------------------------------------------------------------------------------------------

void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  dispatch_f32_f64(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* img = xp + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_i = -1;
          for (int64_t ki = 0; ki < p.kernel_h; ++ki) {
            const int64_t ih = oh * p.stride_h - p.pad_h + ki;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kj = 0; kj < p.kernel_w; ++kj) {
              const int64_t iw = ow * p.stride_w - p.pad_w + kj;
              if (iw < 0 || iw >= W) continue;
              const T v = img[ih * W + iw];
              if (best_i < 0 || v > best || std::isnan(v)) {  // NaN propagates, like PyTorch
                best = v;
                best_i = ih * W + iw;
                if (std::isnan(v)) goto done;
              }
            }
          }
        done:
          op[(pl * OH + oh) * OW + ow] = best;
          ip[(pl * OH + oh) * OW + ow] = best_i;
        }
    }
  });
}

void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
                         const Tensor& indices, const Pool2dParams& p) {
  const int64_t planes = grad_x.size(0) * grad_x.size(1), HW = grad_x.size(2) * grad_x.size(3);
  const int64_t OHW = grad_out.size(2) * grad_out.size(3);
  dispatch_f32_f64(grad_x.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    T* gx = static_cast<T*>(grad_x.data_ptr());
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    const int64_t* ip = static_cast<const int64_t*>(indices.data_ptr());
    for (int64_t i = 0; i < grad_x.numel(); ++i) gx[i] = T(0);
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t o = 0; o < OHW; ++o) {
        const int64_t idx = ip[pl * OHW + o];
        if (idx >= 0) gx[pl * HW + idx] += go[pl * OHW + o];
      }
  });
}

void avg_pool2d_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const double inv = 1.0 / static_cast<double>(p.kernel_h * p.kernel_w);
  dispatch_f32_f64(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          for (int64_t ki = 0; ki < p.kernel_h; ++ki) {
            const int64_t ih = oh * p.stride_h - p.pad_h + ki;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kj = 0; kj < p.kernel_w; ++kj) {
              const int64_t iw = ow * p.stride_w - p.pad_w + kj;
              if (iw >= 0 && iw < W) s += xp[(pl * H + ih) * W + iw];
            }
          }
          op[(pl * OH + oh) * OW + ow] = static_cast<T>(s * inv);
        }
  });
}

void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor&, const Tensor&,
                         const Pool2dParams& p) {
  const int64_t planes = grad_x.size(0) * grad_x.size(1), H = grad_x.size(2), W = grad_x.size(3);
  const int64_t OH = grad_out.size(2), OW = grad_out.size(3);
  const double inv = 1.0 / static_cast<double>(p.kernel_h * p.kernel_w);
  dispatch_f32_f64(grad_x.dtype(), "avg_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    T* gx = static_cast<T*>(grad_x.data_ptr());
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    for (int64_t i = 0; i < grad_x.numel(); ++i) gx[i] = T(0);
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const T g = static_cast<T>(go[(pl * OH + oh) * OW + ow] * inv);
          for (int64_t ki = 0; ki < p.kernel_h; ++ki) {
            const int64_t ih = oh * p.stride_h - p.pad_h + ki;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kj = 0; kj < p.kernel_w; ++kj) {
              const int64_t iw = ow * p.stride_w - p.pad_w + kj;
              if (iw >= 0 && iw < W) gx[(pl * H + ih) * W + iw] += g;
            }
          }
        }
  });
}

// ---- batch norm ---------------------------------------------------------------------------------------------
// x is (N, C, S) contiguous with S = H*W (1 for 2-D input).

void batch_norm_forward_train(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                              const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, double momentum, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const double count = static_cast<double>(N * S);
  dispatch_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    const T* b = static_cast<const T*>(bias.data_ptr());
    T* sm = static_cast<T*>(save_mean.data_ptr());
    T* si = static_cast<T*>(save_invstd.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) s += xp[(n * C + c) * S + i];
      const double mean = s / count;
      double ss = 0;  // two passes: no cancellation for large means
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const double d = xp[(n * C + c) * S + i] - mean;
          ss += d * d;
        }
      const double var = ss / count, invstd = 1.0 / std::sqrt(var + eps);
      sm[c] = static_cast<T>(mean);
      si[c] = static_cast<T>(invstd);
      const double scale = w[c] * invstd, shift = b[c] - mean * scale;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) op[(n * C + c) * S + i] = static_cast<T>(xp[(n * C + c) * S + i] * scale + shift);
      if (running_mean.defined()) {
        T* rm = static_cast<T*>(running_mean.data_ptr());
        rm[c] = static_cast<T>((1 - momentum) * rm[c] + momentum * mean);
      }
      if (running_var.defined()) {
        T* rv = static_cast<T*>(running_var.data_ptr());
        const double unbiased = count > 1 ? ss / (count - 1) : var;
        rv[c] = static_cast<T>((1 - momentum) * rv[c] + momentum * unbiased);
      }
    }
  });
}

void batch_norm_forward_eval(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  dispatch_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const T *w = static_cast<const T*>(weight.data_ptr()), *b = static_cast<const T*>(bias.data_ptr());
    const T *rm = static_cast<const T*>(running_mean.data_ptr()), *rv = static_cast<const T*>(running_var.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      const double scale = w[c] / std::sqrt(static_cast<double>(rv[c]) + eps), shift = b[c] - rm[c] * scale;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) op[(n * C + c) * S + i] = static_cast<T>(xp[(n * C + c) * S + i] * scale + shift);
    }
  });
}

void batch_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const double count = static_cast<double>(N * S);
  dispatch_f32_f64(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    const T *sm = static_cast<const T*>(save_mean.data_ptr()), *si = static_cast<const T*>(save_invstd.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      const double mean = sm[c], invstd = si[c];
      double sg = 0, sgx = 0;  // sum(g), sum(g * xhat)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t j = (n * C + c) * S + i;
          sg += gp[j];
          sgx += gp[j] * (xp[j] - mean) * invstd;
        }
      if (grad_weight.defined()) static_cast<T*>(grad_weight.data_ptr())[c] = static_cast<T>(sgx);
      if (grad_bias.defined()) static_cast<T*>(grad_bias.data_ptr())[c] = static_cast<T>(sg);
      if (!grad_x.defined()) continue;
      // dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat))
      T* gx = static_cast<T*>(grad_x.data_ptr());
      const double k = w[c] * invstd, mg = sg / count, mgx = sgx / count;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t j = (n * C + c) * S + i;
          gx[j] = static_cast<T>(k * (gp[j] - mg - (xp[j] - mean) * invstd * mgx));
        }
    }
  });
}

}  // namespace volt::cpu
