// The fused linear layer on the CPU. Forward: the bias is broadcast into c and the GEMM accumulates onto it
// (beta = 1, as plain linear() does), then one pass applies the activation and keeps the pre-activation where
// the backward needs it. Folding the bias into the GEMM rather than into the pass keeps
// linear(x, w, b, act) bit for bit equal to act(linear(x, w, b)): BLAS adds its k-blocked partial sums onto c,
// so adding the bias afterwards would round differently. Backward: one pass computes grad_pre and the bias's
// column sums, accumulated row by row in the accumulation type as sum(grad, {0}) does (kernels/cpu/reduce.cpp:
// sum_cols), so the bias gradient too equals the unfused ops' bit for bit.
#include <cstring>
#include <vector>

#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/bias_act.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cpu/gemm.h>

namespace volt::cpu {

namespace {

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

void linear_act_fwd(const GemmDesc& d0, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                    const Tensor& pre, Activation act) {
  if (d0.m == 0 || d0.n == 0) return;
  GemmDesc d = d0;
  dispatch_f32_f64(c.dtype(), "linear_act_fwd", [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(c.data_ptr());
    if (bias.defined()) {
      const T* bp = static_cast<const T*>(bias.data_ptr());
      for (int64_t i = 0; i < d.m; ++i) std::memcpy(out + i * d.ldc, bp, sizeof(T) * d.n);
      d.beta = 1.0;
    }
    gemm_ptr(d, c.dtype(), a.data_ptr(), b.data_ptr(), out);
    T* pp = ptr_or_null<T>(pre);
    if (act == Activation::None && pp == nullptr) return;
    biasact::with_activation(act, [&](auto ac) {
      constexpr Activation kAct = decltype(ac)::value;
      for (int64_t i = 0; i < d.m; ++i) {
        T* row = out + i * d.ldc;
        T* prow = pp ? pp + i * d.n : nullptr;
        for (int64_t j = 0; j < d.n; ++j) {
          const T z = row[j];
          if (prow) prow[j] = z;
          row[j] = biasact::forward<kAct>(z);
        }
      }
    });
  });
}

void bias_act_bwd(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& saved,
                  int64_t rows, int64_t cols, Activation act) {
  dispatch_floating(grad_out.dtype(), "bias_act_bwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const T* sv = ptr_or_null<const T>(saved);
    T* gp = ptr_or_null<T>(grad_pre);
    T* gb = ptr_or_null<T>(grad_bias);
    std::vector<A> acc(gb ? static_cast<size_t>(cols) : 0, A(0));
    biasact::with_activation(act, [&](auto ac) {
      constexpr Activation kAct = decltype(ac)::value;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t k = i * cols + j;
          const T v = T(biasact::backward<kAct>(A(g[k]), sv ? A(sv[k]) : A(0)));
          if (gp) gp[k] = v;
          if (gb) acc[j] += A(v);
        }
      }
    });
    for (int64_t j = 0; gb && j < cols; ++j) gb[j] = T(acc[j]);
  });
}

// c = op(A) @ op(B), or zeros when the product is empty over k (nothing to do for an empty c).
static void product_or_zeros(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  if (d.m == 0 || d.n == 0) return;
  if (d.k > 0)
    gemm_ptr(d, c.dtype(), a.data_ptr(), b.data_ptr(), c.data_ptr());
  else
    std::memset(c.data_ptr(), 0, c.nbytes());
}

// The product into grad_pre, then bias_act_bwd over it in place (each element is read before it is written): the
// same arithmetic as the product and bias_act_bwd run as two ops.
void matmul_act_bwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
                    const Tensor& saved, Activation act) {
  if (d.n == 0) return;
  product_or_zeros(d, a, b, grad_pre);
  bias_act_bwd(grad_pre, grad_bias, grad_pre, saved, d.m, d.n, act);
}

// The product, then the column sums of A (the (k, m) output gradient) as bias_act_bwd forms a bias gradient: the
// same arithmetic as the product and the bias gradient run as two ops.
void gemm_bgrad(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias) {
  VOLT_ASSERT(d.trans_a && d.lda == d.m && grad_bias.defined(),
              "gemm_bgrad: A must be the (k, m) output gradient, contiguous, and grad_bias defined");
  if (d.m == 0) return;
  product_or_zeros(d, a, b, c);
  bias_act_bwd(Tensor(), grad_bias, a, Tensor(), d.k, d.m, Activation::None);
}

}  // namespace volt::cpu
