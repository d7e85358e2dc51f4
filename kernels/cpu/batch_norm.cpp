// CPU batch norm, f32 and f64: statistics accumulate in double, in two passes (no cancellation for large means).
// x is (N, C, S) contiguous with S = H*W (1 for 2-D input).
#include <algorithm>
#include <cmath>

#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

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

}  // namespace

constexpr backend::BatchNormKernels batch_norm_kernels{
    .batch_norm_forward_train = {batch_norm_forward_train, backend::kF32F64},
    .batch_norm_forward_eval = {batch_norm_forward_eval, backend::kF32F64},
    .batch_norm_backward = {batch_norm_backward, backend::kF32F64},
};

}  // namespace volt::cpu
