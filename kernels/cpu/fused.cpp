// CPU fused ops (contracts in kernels/backend/fused.h): row loops around the math of kernels/common/fused.h.
#include <limits>

#include <volt/kernels/backend/fused.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>

namespace volt::cpu {

namespace {

template <class P>
P* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<P*>(t.data_ptr()) : nullptr; }

void residual_norm_fwd(const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& r, const Tensor& weight, const Tensor& bias, const NormGeom& g, double eps) {
  dispatch_floating(x.dtype(), "residual_norm_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* rp = static_cast<const T*>(r.data_ptr());
    T* sp = static_cast<T*>(s.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    A* mp = static_cast<A*>(mean.data_ptr());
    A* rsp = static_cast<A*>(rstd.data_ptr());
    const A* w = ptr_or_null<const A>(weight);
    const A* b = ptr_or_null<const A>(bias);
    const int64_t n = g.row_size;
    for (int64_t row = 0; row < g.rows; ++row) {
      const T* xr = xp + row * n;
      const T* rr = rp + row * n;
      T* sr = sp + row * n;
      T* yr = yp + row * n;
      normmath::Welford<A> st = normmath::welford_init<A>();
      for (int64_t j = 0; j < n; ++j) {
        sr[j] = fusedmath::residual_add<T, A>(xr[j], rr[j]);
        normmath::welford_push(st, A(sr[j]));
      }
      const A m = st.mean, rs = normmath::welford_rstd(st, A(eps));
      mp[row] = m;
      rsp[row] = rs;
      for (int64_t j = 0; j < n; ++j)
        yr[j] = T(normmath::norm_forward(A(sr[j]), m, rs, w ? w[j] : A(1), b ? b[j] : A(0)));
    }
  });
}

void residual_norm_bwd(const Tensor& grad_s, const Tensor& grad_y, const Tensor& grad_s_other, const Tensor& s,
                       const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g) {
  dispatch_floating(s.dtype(), "residual_norm_bwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* sp = static_cast<const T*>(s.data_ptr());
    const T* gy = static_cast<const T*>(grad_y.data_ptr());
    const T* go = ptr_or_null<const T>(grad_s_other);
    T* gs = static_cast<T*>(grad_s.data_ptr());
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    const A* w = ptr_or_null<const A>(weight);
    const int64_t n = g.row_size;
    for (int64_t row = 0; row < g.rows; ++row) {
      const int64_t o = row * n;
      const A m = mp[row], rs = rp[row];
      A sg = A(0), sgx = A(0);  // sum(dy * w), sum(dy * w * xhat) over the row
      for (int64_t j = 0; j < n; ++j) {
        const A gw = A(gy[o + j]) * (w ? w[j] : A(1));
        sg += gw;
        sgx += gw * normmath::norm_xhat(A(sp[o + j]), m, rs);
      }
      const A mg = sg / A(n), mgx = sgx / A(n);
      for (int64_t j = 0; j < n; ++j) {
        const A gw = A(gy[o + j]) * (w ? w[j] : A(1));
        const A xh = normmath::norm_xhat(A(sp[o + j]), m, rs);
        gs[o + j] = T(fusedmath::residual_norm_grad_s(gw, xh, rs, mg, mgx, go ? A(go[o + j]) : A(0)));
      }
    }
  });
}

void classifier_fwd(const Tensor& loss_rows, const Tensor& grad, const Tensor& logits, const Tensor& target,
                    const Tensor& scale, int64_t row0, int64_t rows, int64_t v, int64_t ignore_index) {
  dispatch_floating(logits.dtype(), "classifier_fwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* lp = static_cast<const T*>(logits.data_ptr());
    const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
    A* out = static_cast<A*>(loss_rows.data_ptr());
    T* gp = ptr_or_null<T>(grad);
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

constexpr backend::FusedKernels fused_kernels{
    .residual_norm_fwd = {residual_norm_fwd, backend::kFloating},
    .residual_norm_bwd = {residual_norm_bwd, backend::kFloating},
    .classifier_fwd = {classifier_fwd, backend::kFloating},
};

}  // namespace volt::cpu
