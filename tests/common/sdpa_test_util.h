#pragma once
// Shared by the attention tests that run cuDNN's fused SDPA on a GPU (tests/kernels/test_flash_attention.cpp,
// tests/kernels/test_attention_packed.cpp): the skip when it cannot run here, switching it off for a scope, and
// comparisons relative to the expected values' magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <volt/kernels/ops.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/runtime/cuda_api.h>

namespace volt::testing {

// VOLT_DISABLE_CUDNN_SDPA set for the scope (and unset after).
struct DisableCudnnSdpa {
  DisableCudnnSdpa() { setenv("VOLT_DISABLE_CUDNN_SDPA", "1", 1); }
  ~DisableCudnnSdpa() { unsetenv("VOLT_DISABLE_CUDNN_SDPA"); }
};

// Skips (with the reason printed) unless cuDNN's SDPA can run here.
#define SKIP_WITHOUT_CUDNN_SDPA()                                                                               \
  do {                                                                                                          \
    if (!::volt::cuda_available()) GTEST_SKIP() << "no CUDA device: " << ::volt::cuda_status();                 \
    if (!::volt::cudnn_sdpa_built())                                                                            \
      GTEST_SKIP() << "this build has no cuDNN SDPA (configure found no cuDNN frontend headers: scripts/setup.sh)"; \
    if (::volt::cuda_compute_capability(0) < 80)                                                                \
      GTEST_SKIP() << "cuDNN's flash attention needs compute capability 8.0, device 0 has "                     \
                   << ::volt::cuda_compute_capability(0);                                                       \
  } while (0)

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.to(DType::f64).cpu(), b.to(DType::f64).cpu()))).item();
}
inline double max_abs(const Tensor& a) { return max(abs(a.to(DType::f64).cpu())).item(); }

// |actual - expected| <= tol * max(1, max |expected|) everywhere.
inline void expect_close_rel(const Tensor& actual, const Tensor& expected, double tol, const char* what) {
  const double scale = std::max(1.0, max_abs(expected));
  EXPECT_LE(max_abs_diff(actual, expected), tol * scale) << what << " (max |expected| " << scale << ")";
}

}  // namespace volt::testing
