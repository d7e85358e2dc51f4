// CPU fused class-index losses (cross_entropy, nll_loss) and their backward, and the fused classifier
// (fused_cross_entropy); the math is kernels/common/softmax.h and kernels/common/fused.h.
#include <cmath>
#include <limits>

#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/fused.h>
#include <volt/kernels/common/softmax.h>

namespace volt::cpu {

namespace {

// The targets of rows [from, to) against c classes, checked before anything is written (runtime/index_check.h: the
// CPU throws). The ops also check them before any kernel runs; this catches a replayed graph's (kernels/graph.h).
void check_targets(const int64_t* t, int64_t from, int64_t to, int64_t c, int64_t ignore_index, IndexCheck check) {
  for (int64_t row = from; row < to; ++row)
    if (t[row] != ignore_index && (t[row] < 0 || t[row] >= c))
      VOLT_FAIL(detail::index_check_message(check, check.position_offset + row, t[row], c));
}

void class_loss_fwd(const Tensor& out, const Tensor& lse_t, const Tensor& count_t, const Tensor& input,
                    const Tensor& target, int64_t n, int64_t c, int64_t inner, const CeParams& p) {
  dispatch_floating(input.dtype(), p.nll ? "nll_loss" : "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(input.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    A* lse = p.nll ? nullptr : static_cast<A*>(lse_t.data_ptr());
    const A eps = A(p.label_smoothing);
    check_targets(t, 0, n * inner, c, p.ignore_index, p.check);
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
  dispatch_floating(input.dtype(), p.nll ? "nll_loss backward" : "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(input.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    const A* lse = p.nll ? nullptr : static_cast<const A*>(lse_t.data_ptr());
    T* gi = static_cast<T*>(grad_input.data_ptr());
    const A eps = A(p.label_smoothing);
    check_targets(t, 0, n * inner, c, p.ignore_index, p.check);
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

void classifier_fwd(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
                    const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index,
                    IndexCheck check) {
  check_targets(static_cast<const int64_t*>(target.data_ptr()), row0, row0 + rows, v, ignore_index, check);
  dispatch_floating(logits.dtype(), "classifier_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* lp = static_cast<const T*>(logits.data_ptr());
    const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
    A* out = static_cast<A*>(loss_rows.data_ptr());
    T* gp = grad.defined() ? static_cast<T*>(grad.data_ptr()) : nullptr;
    const A sc = gp ? *static_cast<const A*>(scale.data_ptr()) : A(1);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = row0 + i, t = tp[row];
      const T* xr = lp + row * v;
      const bool ignored = t == ignore_index;
      A m = -std::numeric_limits<A>::infinity(), sum = A(0);
      if (!ignored)
        for (int64_t j = 0; j < v; ++j) nnmath::lse_push(m, sum, A(xr[j]));
      const A lse = nnmath::lse_finish(m, sum);
      out[i] = ignored ? A(0) : fusedmath::classifier_row_loss(lse, A(xr[t]));
      if (!gp) continue;
      T* gr = gp + row * v;  // may alias xr: x_j is read before grad_j is written
      for (int64_t j = 0; j < v; ++j)
        gr[j] = ignored ? T(A(0)) : T(fusedmath::classifier_grad(A(xr[j]), lse, j == t, sc));
    }
  });
}

}  // namespace

constexpr backend::LossKernels loss_kernels{
    .class_loss_fwd = {class_loss_fwd, backend::kFloating},
    .class_loss_bwd = {class_loss_bwd, backend::kFloating},
    .classifier_fwd = {classifier_fwd, backend::kFloating},
};

}  // namespace volt::cpu
