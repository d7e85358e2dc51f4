// CPU softmax / log_softmax, fused class-index losses and dropout. Layouts are described in nn_backend.h.
#include <cmath>
#include <limits>
#include <vector>

#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cpu/nn_backend.h>

namespace volt::cpu {

namespace {

template <class T>
using Acc = acc_t<T>;

// Runs f(T{}) for the floating types the nn kernels support.
template <class F>
void dispatch_nn(DType dt, const char* op, F&& f) {
  dispatch_floating(dt, op, std::forward<F>(f));
}

}  // namespace

void softmax_fwd(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_nn(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    if (inner == 1) {
      for (int64_t o = 0; o < outer; ++o) {
        const T* xr = x + o * r;
        T* yr = y + o * r;
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t k = 0; k < r; ++k) m = A(xr[k]) > m ? A(xr[k]) : m;
        if (!std::isfinite(static_cast<double>(m))) m = A(0);  // all -inf (or +inf/NaN): let the math produce NaN/-inf
        A s = 0;
        for (int64_t k = 0; k < r; ++k) s += em::exp_(A(xr[k]) - m);
        if (log) {
          A lse = m + em::log_(s);
          for (int64_t k = 0; k < r; ++k) yr[k] = T(A(xr[k]) - lse);
        } else {
          A inv = A(1) / s;
          for (int64_t k = 0; k < r; ++k) yr[k] = T(em::exp_(A(xr[k]) - m) * inv);
        }
      }
      return;
    }
    // Strided: per outer slice, keep (max, sum) vectors over inner so the inner loops are unit-stride.
    std::vector<A> m(static_cast<size_t>(inner)), s(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* xb = x + o * r * inner;
      T* yb = y + o * r * inner;
      for (int64_t i = 0; i < inner; ++i) { m[i] = -std::numeric_limits<A>::infinity(); s[i] = 0; }
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) m[i] = A(xb[k * inner + i]) > m[i] ? A(xb[k * inner + i]) : m[i];
      for (int64_t i = 0; i < inner; ++i)
        if (!std::isfinite(static_cast<double>(m[i]))) m[i] = A(0);
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) s[i] += em::exp_(A(xb[k * inner + i]) - m[i]);
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          A v = A(xb[k * inner + i]) - m[i];
          yb[k * inner + i] = log ? T(v - em::log_(s[i])) : T(em::exp_(v) / s[i]);
        }
    }
  });
}

void class_loss_fwd(const Tensor& out, const Tensor& lse_t, const Tensor& count_t, const Tensor& input,
                    const Tensor& target, int64_t n, int64_t c, int64_t inner, const CeParams& p) {
  dispatch_nn(input.dtype(), p.nll ? "nll_loss" : "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T* x = static_cast<const T*>(input.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    A* lse = p.nll ? nullptr : static_cast<A*>(lse_t.data_ptr());
    const A eps = A(p.label_smoothing);
    double total = 0;  // reductions sum in double so a large batch of f32 losses does not lose digits
    int64_t count = 0;
    for (int64_t b = 0; b < n; ++b) {
      const T* xb = x + b * c * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t row = b * inner + i;
        const int64_t tgt = t[row];
        A loss = 0;
        if (p.nll) {
          if (tgt != p.ignore_index) loss = -A(xb[tgt * inner + i]);
        } else {
          A m = -std::numeric_limits<A>::infinity(), sx = 0;
          for (int64_t j = 0; j < c; ++j) {
            A v = A(xb[j * inner + i]);
            m = v > m ? v : m;
            sx += v;
          }
          A mm = std::isfinite(static_cast<double>(m)) ? m : A(0);
          A s = 0;
          for (int64_t j = 0; j < c; ++j) s += em::exp_(A(xb[j * inner + i]) - mm);
          A l = mm + em::log_(s);
          lse[row] = l;
          if (tgt != p.ignore_index) loss = nnmath::ce_row_loss(l, A(xb[tgt * inner + i]), sx, c, eps);
        }
        if (tgt != p.ignore_index) ++count;
        if (p.reduction == LossReduction::None) o[row] = T(loss);
        else total += static_cast<double>(loss);
      }
    }
    static_cast<A*>(count_t.data_ptr())[0] = A(count);
    if (p.reduction == LossReduction::Sum) o[0] = T(A(total));
    // Mean over zero non-ignored targets is 0/0 = NaN, as in PyTorch.
    if (p.reduction == LossReduction::Mean) o[0] = T(A(total / static_cast<double>(count)));
  });
}

void class_loss_bwd(const Tensor& grad_input, const Tensor& grad_out, const Tensor& input, const Tensor& target,
                    const Tensor& lse_t, const Tensor& count_t, int64_t n, int64_t c, int64_t inner,
                    const CeParams& p) {
  dispatch_nn(input.dtype(), p.nll ? "nll_loss backward" : "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T* x = static_cast<const T*>(input.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    const A* lse = p.nll ? nullptr : static_cast<const A*>(lse_t.data_ptr());
    T* gi = static_cast<T*>(grad_input.data_ptr());
    const A eps = A(p.label_smoothing);
    A scale = A(1);
    if (p.reduction == LossReduction::Mean) scale = A(1) / static_cast<const A*>(count_t.data_ptr())[0];
    for (int64_t b = 0; b < n; ++b) {
      const T* xb = x + b * c * inner;
      T* gb = gi + b * c * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t row = b * inner + i;
        const int64_t tgt = t[row];
        if (tgt == p.ignore_index) {
          for (int64_t j = 0; j < c; ++j) gb[j * inner + i] = T(0);
          continue;
        }
        A g = A(go[p.reduction == LossReduction::None ? row : 0]) * scale;
        if (p.nll) {
          for (int64_t j = 0; j < c; ++j) gb[j * inner + i] = T(j == tgt ? -g : A(0));
        } else {
          const A l = lse[row];
          for (int64_t j = 0; j < c; ++j)
            gb[j * inner + i] = T(g * nnmath::ce_grad(em::exp_(A(xb[j * inner + i]) - l), j == tgt, c, eps));
        }
      }
    }
  });
}

void dropout_fwd(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset, double p) {
  dispatch_nn(in.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    bool* mk = static_cast<bool*>(mask.data_ptr());
    const A scale = p < 1.0 ? A(1.0 / (1.0 - p)) : A(0);
    const float pf = static_cast<float>(p);
    const int64_t n = in.numel();
    for (int64_t i = 0; i < n; ++i) {
      bool keep = nnmath::dropout_keep(seed, offset, static_cast<uint64_t>(i), pf);
      mk[i] = keep;
      y[i] = keep ? T(A(x[i]) * scale) : T(A(0));
    }
  });
}

void dropout_bwd(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  dispatch_nn(grad_out.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const bool* mk = static_cast<const bool*>(mask.data_ptr());
    T* o = static_cast<T*>(grad_in.data_ptr());
    const int64_t n = grad_out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = mk[i] ? T(A(g[i]) * A(scale)) : T(A(0));
  });
}

}  // namespace volt::cpu
