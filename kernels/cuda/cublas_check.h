#pragma once
// Status checking for cuBLAS and cuDNN calls (include only from files compiled with the CUDA backend). A failed
// call throws volt::Error naming the call, the file and line, and the library's status string.
#include <cublas_v2.h>
#include <cudnn.h>

#include <cuda_runtime_api.h>

#include <volt/runtime/cuda_check.h>
#include <volt/runtime/error.h>

#define VOLT_CUBLAS_CHECK(expr)                                                                        \
  do {                                                                                                 \
    cublasStatus_t volt_st_ = (expr);                                                                  \
    if (volt_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::volt::detail::throw_error(__FILE__, __LINE__,                                                  \
                                  ::volt::detail::concat("cuBLAS error at ", __FILE__, ":", __LINE__,  \
                                                         ": ", #expr, " returned ",                    \
                                                         cublasGetStatusString(volt_st_)));            \
  } while (0)

#define VOLT_CUDNN_CHECK(expr)                                                                         \
  do {                                                                                                 \
    cudnnStatus_t volt_st_ = (expr);                                                                   \
    if (volt_st_ != CUDNN_STATUS_SUCCESS)                                                              \
      ::volt::detail::throw_error(__FILE__, __LINE__,                                                  \
                                  ::volt::detail::concat("cuDNN error at ", __FILE__, ":", __LINE__,   \
                                                         ": ", #expr, " returned ",                    \
                                                         cudnnGetErrorString(volt_st_)));              \
  } while (0)

