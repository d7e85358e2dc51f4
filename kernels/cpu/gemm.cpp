// CPU GEMM. With OpenBLAS (VOLT_HAVE_OPENBLAS) f32/f64 go to cblas_?gemm: measured single-threaded on the
// MLP shapes (784-128-10, batch 16/256) it reaches ~85-95% of the FMA peak where Eigen 3.4 reaches ~70% and
// ~50% for the 10-wide layer (benchmarks/bench_gemm.cpp). Without it, Eigen's GEMM on strided Maps.
// Threading: like the Eigen path (built without OpenMP), OpenBLAS runs on one thread unless the user sets
// OPENBLAS_NUM_THREADS; its own default (all cores, spinning workers) oversubscribes the machine when
// several ranks share it, as CPU data-parallel runs do.
#include <Eigen/Core>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/cpu/linalg.h"

#if VOLT_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace volt::cpu {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;

template <class T>
void eigen_gemm(const GemmDesc& d, const T* a, const T* b, T* c) {
  // Stored shapes: A (m, k) or (k, m); B (k, n) or (n, k).
  ConstMap<T> A(a, d.trans_a ? d.k : d.m, d.trans_a ? d.m : d.k, Eigen::OuterStride<>(d.lda));
  ConstMap<T> B(b, d.trans_b ? d.n : d.k, d.trans_b ? d.k : d.n, Eigen::OuterStride<>(d.ldb));
  MutMap<T> C(c, d.m, d.n, Eigen::OuterStride<>(d.ldc));
  const T alpha = static_cast<T>(d.alpha), beta = static_cast<T>(d.beta);
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == T(0)) {
      C.noalias() = alpha * (opa * opb);
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += alpha * (opa * opb);
    }
  };
  if (!d.trans_a && !d.trans_b) run(A, B);
  else if (!d.trans_a) run(A, B.transpose());
  else if (!d.trans_b) run(A.transpose(), B);
  else run(A.transpose(), B.transpose());
}

#if VOLT_HAVE_OPENBLAS
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, const GemmDesc& d, const float* a, int lda,
                      const float* b, int ldb, float* c) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(d.m), static_cast<int>(d.n), static_cast<int>(d.k),
              static_cast<float>(d.alpha), a, lda, b, ldb, static_cast<float>(d.beta), c, static_cast<int>(d.ldc));
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, const GemmDesc& d, const double* a, int lda,
                      const double* b, int ldb, double* c) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(d.m), static_cast<int>(d.n), static_cast<int>(d.k), d.alpha,
              a, lda, b, ldb, d.beta, c, static_cast<int>(d.ldc));
}

void pin_threads_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  });
}

template <class T>
void openblas_gemm(const GemmDesc& d, const T* a, const T* b, T* c, std::vector<T>& packed) {
  const T* bp = b;
  int64_t ldb = d.ldb;
  bool tb = d.trans_b;
  // OpenBLAS's NT kernel is slow for a narrow output (n = 10 classes: ~40% of peak vs ~65% for NN), and
  // B^T is then tiny: repack it as a dense (k, n) matrix.
  if (tb && d.n <= 16) {
    packed.resize(static_cast<size_t>(d.k * d.n));
    for (int64_t j = 0; j < d.n; ++j)
      for (int64_t p = 0; p < d.k; ++p) packed[p * d.n + j] = b[j * d.ldb + p];
    bp = packed.data();
    ldb = d.n;
    tb = false;
  }
  blas_gemm(d.trans_a ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, d, a, static_cast<int>(d.lda), bp,
            static_cast<int>(ldb), c);
}
#endif

template <class T>
void gemm_typed(const GemmDesc& d, const T* a, const T* b, T* c) {
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {  // an empty sum: C = beta * C
    for (int64_t bi = 0; bi < d.batch; ++bi) {
      MutMap<T> C(c + bi * d.stride_c, d.m, d.n, Eigen::OuterStride<>(d.ldc));
      if (d.beta == 0.0) C.setZero();
      else C *= static_cast<T>(d.beta);
    }
    return;
  }
#if VOLT_HAVE_OPENBLAS
  pin_threads_once();
  thread_local std::vector<T> packed;  // reused across calls: no allocation per small GEMM
  packed.clear();
  // A broadcast B (stride 0) repacked once serves every batch.
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    if (bi > 0 && d.stride_b == 0 && !packed.empty()) {
      GemmDesc dd = d;
      dd.trans_b = false;
      dd.ldb = d.n;
      blas_gemm(d.trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, dd, a + bi * d.stride_a,
                static_cast<int>(d.lda), packed.data(), static_cast<int>(d.n), c + bi * d.stride_c);
      continue;
    }
    openblas_gemm(d, a + bi * d.stride_a, b + bi * d.stride_b, c + bi * d.stride_c, packed);
  }
#else
  for (int64_t bi = 0; bi < d.batch; ++bi)
    eigen_gemm(d, a + bi * d.stride_a, b + bi * d.stride_b, c + bi * d.stride_c);
#endif
}

}  // namespace

void gemm_ptr(const GemmDesc& d, DType dtype, const void* a, const void* b, void* c) {
  switch (dtype) {
    case DType::f32:
      return gemm_typed(d, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c));
    case DType::f64:
      return gemm_typed(d, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(c));
    default:
      VOLT_FAIL("gemm (CPU): dtype ", dtype_name(dtype), " is not supported; expected float32 or float64");
  }
}

void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  gemm_ptr(d, c.dtype(), a.data_ptr(), b.data_ptr(), c.data_ptr());
}

}  // namespace volt::cpu
