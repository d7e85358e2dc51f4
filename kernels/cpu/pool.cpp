// CPU max and average pooling, f32 and f64; max pooling records each argmax for the backward.
#include <algorithm>
#include <cmath>
#include <limits>

#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

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
    std::fill(gx, gx + grad_x.numel(), T(0));  // numel() once, not per element
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
    std::fill(gx, gx + grad_x.numel(), T(0));  // numel() once, not per element
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

}  // namespace

constexpr backend::PoolKernels pool_kernels{
    .max_pool2d_forward = {max_pool2d_forward, backend::kF32F64},
    .max_pool2d_backward = {max_pool2d_backward, backend::kF32F64},
    .avg_pool2d_forward = {avg_pool2d_forward, backend::kF32F64},
    .avg_pool2d_backward = {avg_pool2d_backward, backend::kF32F64},
};

}  // namespace volt::cpu
