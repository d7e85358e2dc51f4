// CPU layer_norm / group_norm and the fused residual_layer_norm: loops over the rows described by NormGeom; the math
// is kernels/common/norm.h and kernels/common/fused.h. y and its gradient are of element type Y: x's, or f16/bf16
// for f32 x (kernels/common/norm_out.h).
#include <algorithm>
#include <vector>

#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/fused.h>
#include <volt/kernels/common/norm_out.h>

namespace volt::cpu {

namespace {

template <class A>
const A* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<const A*>(t.data_ptr()) : nullptr; }

void norm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
              const Tensor& bias, const NormGeom& g, double eps) {
  dispatch_norm(x.dtype(), out.dtype(), "norm_fwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    Y* yp = static_cast<Y*>(out.data_ptr());
    A* mp = static_cast<A*>(mean.data_ptr());
    A* rp = static_cast<A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* b = ptr_or_null<A>(bias);
    const int64_t cpg = g.channels_per_group();
    for (int64_t r = 0; r < g.rows; ++r) {
      const T* xr = xp + r * g.row_size;
      Y* yr = yp + r * g.row_size;
      normmath::Welford<A> st = normmath::welford_init<A>();
      for (int64_t j = 0; j < g.row_size; ++j) normmath::welford_push(st, A(xr[j]));
      const A m = st.mean, rs = normmath::welford_rstd(st, A(eps));
      mp[r] = m;
      rp[r] = rs;
      const int64_t k0 = g.param_index(r, 0);
      for (int64_t c = 0; c < cpg; ++c) {
        const A wk = w ? w[k0 + c] : A(1), bk = b ? b[k0 + c] : A(0);
        for (int64_t s = 0; s < g.inner; ++s) {
          const int64_t j = c * g.inner + s;
          yr[j] = Y(normmath::norm_forward(A(xr[j]), m, rs, wk, bk));
        }
      }
    }
  });
}

void norm_bwd(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
              const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormGeom& g) {
  dispatch_norm(x.dtype(), grad_out.dtype(), "norm_bwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const Y* gp = static_cast<const Y*>(grad_out.data_ptr());
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    T* gx = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    const int64_t P = g.num_params(), cpg = g.channels_per_group();
    std::vector<A> dw(grad_weight.defined() ? static_cast<size_t>(P) : 0, A(0));
    std::vector<A> db(grad_bias.defined() ? static_cast<size_t>(P) : 0, A(0));
    const A n = A(g.row_size);
    for (int64_t r = 0; r < g.rows; ++r) {
      const T* xr = xp + r * g.row_size;
      const Y* gr = gp + r * g.row_size;
      const A m = mp[r], rs = rp[r];
      const int64_t k0 = g.param_index(r, 0);
      A sg = A(0), sgx = A(0);  // sum(dy * w), sum(dy * w * xhat) over the row
      for (int64_t c = 0; c < cpg; ++c) {
        const int64_t k = k0 + c;
        const A wk = w ? w[k] : A(1);
        for (int64_t s = 0; s < g.inner; ++s) {
          const int64_t j = c * g.inner + s;
          const A dy = A(gr[j]), xh = normmath::norm_xhat(A(xr[j]), m, rs);
          sg += dy * wk;
          sgx += dy * wk * xh;
          if (!dw.empty()) dw[k] += dy * xh;
          if (!db.empty()) db[k] += dy;
        }
      }
      if (!gx) continue;
      T* gxr = gx + r * g.row_size;
      const A mg = sg / n, mgx = sgx / n;
      for (int64_t c = 0; c < cpg; ++c) {
        const A wk = w ? w[k0 + c] : A(1);
        for (int64_t s = 0; s < g.inner; ++s) {
          const int64_t j = c * g.inner + s;
          const A xh = normmath::norm_xhat(A(xr[j]), m, rs);
          gxr[j] = T(normmath::norm_backward_dx(A(gr[j]) * wk, xh, rs, mg, mgx));
        }
      }
    }
    if (!dw.empty()) std::copy(dw.begin(), dw.end(), static_cast<A*>(grad_weight.data_ptr()));
    if (!db.empty()) std::copy(db.begin(), db.end(), static_cast<A*>(grad_bias.data_ptr()));
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
    const R* rp = static_cast<const R*>(r.data_ptr());
    T* sp = static_cast<T*>(s.data_ptr());
    Y* yp = static_cast<Y*>(y.data_ptr());
    A* mp = static_cast<A*>(mean.data_ptr());
    A* rsp = static_cast<A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* b = ptr_or_null<A>(bias);
    const int64_t n = g.row_size;
    for (int64_t row = 0; row < g.rows; ++row) {
      const T* xr = xp + row * n;
      const R* rr = rp + row * n;
      T* sr = sp + row * n;
      Y* yr = yp + row * n;
      normmath::Welford<A> st = normmath::welford_init<A>();
      for (int64_t j = 0; j < n; ++j) {
        sr[j] = fusedmath::residual_add<T, A>(xr[j], rr[j]);
        normmath::welford_push(st, A(sr[j]));
      }
      const A m = st.mean, rs = normmath::welford_rstd(st, A(eps));
      mp[row] = m;
      rsp[row] = rs;
      for (int64_t j = 0; j < n; ++j)
        yr[j] = Y(normmath::norm_forward(A(sr[j]), m, rs, w ? w[j] : A(1), b ? b[j] : A(0)));
    }
  });
}

void residual_norm_bwd(const Tensor& grad_s, const Tensor& grad_r, const Tensor& grad_y, const Tensor& grad_s_other,
                       const Tensor& s, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                       const NormGeom& g) {
  dispatch_norm(s.dtype(), grad_y.dtype(), "residual_norm_bwd", [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using Y = decltype(ytag);
    using A = acc_t<T>;
    const T* sp = static_cast<const T*>(s.data_ptr());
    const Y* gy = static_cast<const Y*>(grad_y.data_ptr());
    const T* go = (grad_s_other.defined() ? static_cast<const T*>(grad_s_other.data_ptr()) : nullptr);
    T* gs = static_cast<T*>(grad_s.data_ptr());
    Y* gr = residual_grad_ptr<T, Y>(grad_r, grad_y.dtype(), s.dtype());  // r's gradient, when r is stored in Y
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
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
        const A v = fusedmath::residual_norm_grad_s(gw, xh, rs, mg, mgx, go ? A(go[o + j]) : A(0));
        gs[o + j] = T(v);
        if (gr) gr[o + j] = Y(gs[o + j]);  // as a cast of grad_s rounds it
      }
    }
  });
}

}  // namespace

constexpr backend::NormKernels norm_kernels{
    .norm_fwd = {norm_fwd, backend::kFloating},
    .norm_bwd = {norm_bwd, backend::kFloating},
    .residual_norm_fwd = {residual_norm_fwd, backend::kFloating},
    .residual_norm_bwd = {residual_norm_bwd, backend::kFloating},
};

}  // namespace volt::cpu
