#pragma once
// What the cuDNN-backed kernels share (kernels/cuda/conv.cu, pool.cu, batch_norm.cu): one cuDNN handle per
// device (made on first use, kept for the process; bound to the call's stream, launch_stream(), at each use), the data
// type and scaling-factor rules, and an RAII 4-D tensor descriptor. Half types compute in f32 (cuDNN's rule for
// HALF/BFLOAT16 data).
#include <cudnn.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include <volt/kernels/cuda/cublas_check.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_graph.h>

namespace volt::cuda::cudnn {

inline cudnnHandle_t handle_for(const Device& device) {
  static std::mutex mu;
  static std::vector<cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() <= static_cast<size_t>(device.index)) handles.resize(device.index + 1, nullptr);
  cudnnHandle_t& h = handles[device.index];
  if (!h) {
    VOLT_CHECK(!cuda_graph::is_capturing(device), "cuDNN: the first cuDNN call on ", device.str(), " ran during a "
               "CUDA graph capture, which cannot create its handle; run the step once eagerly before capturing it");
    VOLT_CUDNN_CHECK(cudnnCreate(&h));
  }
  VOLT_CUDNN_CHECK(cudnnSetStream(h, launch_stream()));
  return h;
}

inline cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: VOLT_FAIL("cuDNN: dtype ", dtype_name(t), " is not supported; expected a floating dtype");
  }
}

// Scaling factors: double for double data, float otherwise.
struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scalars(DType t) : dbl(t == DType::f64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
};

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w) {
    VOLT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    VOLT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(t), static_cast<int>(n),
                                                static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  explicit TensorDesc(const Tensor& t)  // (N, C, H, W), or (N, C, S...) flattened to (N, C, S, 1)
      : TensorDesc(t.dtype(), t.size(0), t.size(1), t.dim() == 4 ? t.size(2) : t.numel() / std::max<int64_t>(t.size(0) * t.size(1), 1),
                   t.dim() == 4 ? t.size(3) : 1) {}
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

}  // namespace volt::cuda::cudnn
