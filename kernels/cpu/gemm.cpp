// CPU GEMM. Narrow f32 outputs (8 < n <= 16, A B^T: a classifier layer's forward) use a hand-written AVX2
// kernel (gemm_nt_narrow). With OpenBLAS (VOLT_HAVE_OPENBLAS) f32/f64 go to cblas_?gemm: measured single-threaded on the
// MLP shapes (784-128-10, batch 16/256) it reaches ~85-95% of the FMA peak where Eigen 3.4 reaches ~70% and
// ~50% for the 10-wide layer (benchmarks/bench_gemm.cpp). Without it, Eigen's GEMM on strided Maps.
// Threading: like the Eigen path (built without OpenMP), OpenBLAS runs on one thread unless the user sets
// OPENBLAS_NUM_THREADS; its own default (all cores, spinning workers) oversubscribes the machine when
// several ranks share it, as CPU data-parallel runs do.
#include <Eigen/Core>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <vector>

#include <volt/kernels/backend/registry.h>
#include <volt/kernels/cpu/gemm.h>

#if VOLT_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VOLT_NARROW_GEMM 1
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

#if VOLT_NARROW_GEMM
// Lane i of the result = the sum of the lanes of v[i].
inline __m256 hsum8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

inline __m256 scale_out(__m256 acc, const float* c_old, float alpha, float beta) {
  const __m256 r = _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
  return beta == 0.0f ? r : _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c_old), r);
}

// Rows i..i+R-1, columns 0-7 of C, from the packed (k, 8) block w of B^T: one broadcast and one FMA per row
// and k, R accumulators in registers.
template <int R>
inline void narrow_rows(const GemmDesc& d, const float* a, const float* w, float* c, int64_t i, float alpha,
                        float beta) {
  const int64_t lda = d.lda, k = d.k;  // locals: kept in registers across the loop
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const float* ar[R];
  for (int r = 0; r < R; ++r) ar[r] = a + (i + r) * lda;
  for (int64_t p = 0; p < k; ++p) {
    const __m256 wv = _mm256_load_ps(w + p * 8);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ar[r] + p), wv, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float* out = c + (i + r) * d.ldc;
    _mm256_storeu_ps(out, scale_out(acc[r], out, alpha, beta));
  }
}

// C = alpha * A B^T + beta * C for a narrow output, 8 < n <= 16 (a classifier's 10 logits), f32, with A (m, k)
// and B (n, k) row-major. BLAS kernels blocked for wide outputs waste most of a vector on n = 10 (55-60% of
// peak). Here columns 0-7 use a broadcast kernel over a packed (k, 8) copy of B^T, 12 rows at a time (one
// vector load per FMA), and the remaining n - 8 columns dot products along k, 4 rows x 2 columns per
// batched horizontal sum. Measured ~0.70 of the FMA peak on (256 x 128) x (128 x 10).
void gemm_nt_narrow(const GemmDesc& d, const float* a, const float* b, float* c, std::vector<float>& wt) {
  const int64_t m = d.m, n = d.n, k = d.k, lda = d.lda, ldb = d.ldb, ldc = d.ldc;
  const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  // 32-byte aligned panel: every row load stays within one cache line.
  wt.resize(static_cast<size_t>(k * 8 + 8));
  float* w = wt.data() + ((32 - reinterpret_cast<uintptr_t>(wt.data()) % 32) % 32) / sizeof(float);
  for (int64_t p = 0; p < k; ++p)
    for (int j = 0; j < 8; ++j) w[p * 8 + j] = b[j * ldb + p];
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) narrow_rows<8>(d, a, w, c, i, alpha, beta);
  for (; i < m; ++i) narrow_rows<1>(d, a, w, c, i, alpha, beta);
  const int64_t k8 = k / 8 * 8;
  for (int64_t j = 8; j < n; j += 2) {
    const float* b0 = b + j * ldb;
    const float* b1 = b + std::min<int64_t>(j + 1, n - 1) * d.ldb;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const float* ar[4];
      for (int r = 0; r < 4; ++r) ar[r] = a + std::min<int64_t>(i0 + r, m - 1) * lda;
      __m256 acc[8];
      for (auto& v : acc) v = _mm256_setzero_ps();
      for (int64_t p = 0; p < k8; p += 8) {
        const __m256 w0 = _mm256_loadu_ps(b0 + p), w1 = _mm256_loadu_ps(b1 + p);
        for (int r = 0; r < 4; ++r) {
          const __m256 x = _mm256_loadu_ps(ar[r] + p);
          acc[2 * r] = _mm256_fmadd_ps(x, w0, acc[2 * r]);
          acc[2 * r + 1] = _mm256_fmadd_ps(x, w1, acc[2 * r + 1]);
        }
      }
      alignas(32) float dots[8];
      _mm256_store_ps(dots, hsum8(acc));
      for (int64_t r = 0; r < 4 && i0 + r < m; ++r)
        for (int64_t q = 0; q < 2 && j + q < n; ++q) {
          float dot = dots[2 * r + q];
          for (int64_t p = k8; p < k; ++p) dot += ar[r][p] * (q ? b1 : b0)[p];
          float& out = c[(i0 + r) * ldc + j + q];
          out = alpha * dot + (beta == 0.0f ? 0.0f : beta * out);
        }
    }
  }
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
#if VOLT_NARROW_GEMM
  if constexpr (std::is_same_v<T, float>) {
    if (!d.trans_a && d.trans_b && d.n > 8 && d.n <= 16 && d.k >= 16) {
      thread_local std::vector<float> wt;
      for (int64_t bi = 0; bi < d.batch; ++bi)
        gemm_nt_narrow(d, a + bi * d.stride_a, b + bi * d.stride_b, c + bi * d.stride_c, wt);
      return;
    }
  }
#endif
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

namespace {
void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  gemm_ptr(d, c.dtype(), a.data_ptr(), b.data_ptr(), c.data_ptr());
}
}  // namespace

constexpr backend::LinalgKernels linalg_kernels{
    .gemm = {gemm, backend::kF32F64},
    .linear_act_fwd = {linear_act_fwd, backend::kF32F64},
    .bias_act_bwd = {bias_act_bwd, backend::kFloating},
    .matmul_act_bwd = {matmul_act_bwd, backend::kF32F64},
    .gemm_bgrad = {gemm_bgrad, backend::kF32F64},
};

}  // namespace volt::cpu
