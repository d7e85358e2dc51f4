// cuDNN max and average pooling; descriptors are built per call (cheap) and freed by RAII wrappers.
#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/cuda/cudnn_util.cuh>

namespace volt::cuda {

namespace {

using cudnn::handle_for;
using cudnn::Scalars;
using cudnn::TensorDesc;

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(cudnnPoolingMode_t mode, const Pool2dParams& p) {
    VOLT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    VOLT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(p.kernel_h),
                                                 static_cast<int>(p.kernel_w), static_cast<int>(p.pad_h),
                                                 static_cast<int>(p.pad_w), static_cast<int>(p.stride_h),
                                                 static_cast<int>(p.stride_w)));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

void pool_forward(cudnnPoolingMode_t mode, const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  TensorDesc xd(x), yd(out);
  PoolDesc pd(mode, p);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnPoolingForward(h, pd.d, s.one(), xd.d, x.data_ptr(), s.zero(), yd.d, out.data_ptr()));
}

void pool_backward(cudnnPoolingMode_t mode, const Tensor& grad_x, const Tensor& grad_out, const Tensor& x,
                   const Tensor& out, const Pool2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  TensorDesc xd(x), yd(out);
  PoolDesc pd(mode, p);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnPoolingBackward(h, pd.d, s.one(), yd.d, out.data_ptr(), yd.d, grad_out.data_ptr(), xd.d,
                                        x.data_ptr(), s.zero(), xd.d, grad_x.data_ptr()));
}

void max_pool2d_forward(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  // The deterministic mode routes each gradient to one argmax (the first), like the CPU path.
  pool_forward(CUDNN_POOLING_MAX_DETERMINISTIC, out, x, p);
}
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
                         const Tensor&, const Pool2dParams& p) {
  pool_backward(CUDNN_POOLING_MAX_DETERMINISTIC, grad_x, grad_out, x, out, p);
}
void avg_pool2d_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  pool_forward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, out, x, p);
}
void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
                         const Pool2dParams& p) {
  pool_backward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, grad_x, grad_out, x, out, p);
}

}  // namespace

constexpr backend::PoolKernels pool_kernels{
    .max_pool2d_forward = {max_pool2d_forward, backend::kFloating},
    .max_pool2d_backward = {max_pool2d_backward, backend::kFloating},
    .avg_pool2d_forward = {avg_pool2d_forward, backend::kFloating},
    .avg_pool2d_backward = {avg_pool2d_backward, backend::kFloating},
};

}  // namespace volt::cuda
