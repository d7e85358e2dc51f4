#pragma once
// Status checking for CUDA runtime calls (include only from files compiled with the CUDA backend).
#include <cuda_runtime_api.h>

#include <volt/runtime/error.h>

#define VOLT_CUDA_CHECK(expr)                                                                       \
  do {                                                                                              \
    cudaError_t volt_err_ = (expr);                                                                 \
    if (volt_err_ != cudaSuccess)                                                                   \
      ::volt::detail::throw_error(__FILE__, __LINE__,                                               \
                                  ::volt::detail::concat("CUDA error at ", __FILE__, ":", __LINE__, \
                                                         ": ", #expr, " returned ",                 \
                                                         cudaGetErrorString(volt_err_)));           \
  } while (0)

// For kernel launches: checks the launch configuration error right away.
#define VOLT_CUDA_CHECK_LAUNCH() VOLT_CUDA_CHECK(cudaGetLastError())
