// cuDNN batch norm, training and evaluation forward and the training backward.
// (N, C) and (N, C, S) inputs run as (N, C, S, 1) in SPATIAL mode: statistics per channel over N and S.
// cuDNN updates the running variance with the unbiased batch variance, as Volt's contract requires.
#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/scratch.h>
#include <volt/kernels/cuda/cudnn_util.cuh>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/runtime/cuda_check.h>

// The batch-norm entry points are deprecated in cuDNN 9 in favour of the graph API but remain supported.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace volt::cuda {

namespace {

using cudnn::handle_for;
using cudnn::Scalars;
using cudnn::TensorDesc;

struct BnDescs {
  TensorDesc x;
  cudnnTensorDescriptor_t bn = nullptr;
  explicit BnDescs(const Tensor& t) : x(t) {
    VOLT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bn));
    VOLT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bn, x.d, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BnDescs() { cudnnDestroyTensorDescriptor(bn); }
};

double bn_eps(double eps) {
  VOLT_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm (CUDA): eps ", eps, " is below cuDNN's minimum ",
             CUDNN_BN_MIN_EPSILON);
  return eps;
}

void batch_norm_forward_train(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                              const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, double momentum, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  // cuDNN takes both running statistics or neither.
  Tensor rm = running_mean, rv = running_var;
  if (rm.defined() != rv.defined()) {
    // Backend-level scratch and fills on the call's stream (no call up into the ops layer).
    if (!rm.defined()) {
      rm = backend::scratch(rv.shape(), rv.dtype(), rv.device());
      VOLT_CUDA_CHECK(cudaMemsetAsync(rm.data_ptr(), 0, rm.nbytes(), launch_stream()));
    }
    if (!rv.defined()) {
      rv = backend::scratch(rm.shape(), rm.dtype(), rm.device());
      // Fill reads its input: keep initcheck quiet
      VOLT_CUDA_CHECK(cudaMemsetAsync(rv.data_ptr(), 0, rv.nbytes(), launch_stream()));
      ElemParams one;
      one.a = 1.0;
      elementwise_kernels.unary.fn(UnaryOp::Fill, rv, rv, one);
    }
  }
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d, out.data_ptr(), d.bn,
      weight.data_ptr(), bias.data_ptr(), momentum, rm.defined() ? rm.data_ptr() : nullptr,
      rv.defined() ? rv.data_ptr() : nullptr, bn_eps(eps), save_mean.data_ptr(), save_invstd.data_ptr()));
}

void batch_norm_forward_eval(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d, out.data_ptr(), d.bn,
      weight.data_ptr(), bias.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), bn_eps(eps)));
}

void batch_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  // cuDNN writes all three gradients: scratch tensors stand in for the ones nobody asked for.
  Tensor dx = grad_x.defined() ? grad_x : empty(x.shape(), x.dtype(), x.device());
  Tensor dw = grad_weight.defined() ? grad_weight : empty(weight.shape(), weight.dtype(), weight.device());
  Tensor db = grad_bias.defined() ? grad_bias : empty(weight.shape(), weight.dtype(), weight.device());
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d,
      grad_out.data_ptr(), d.x.d, dx.data_ptr(), d.bn, weight.data_ptr(), dw.data_ptr(), db.data_ptr(), bn_eps(eps),
      save_mean.data_ptr(), save_invstd.data_ptr()));
}

}  // namespace

constexpr backend::BatchNormKernels batch_norm_kernels{
    .batch_norm_forward_train = {batch_norm_forward_train, backend::kFloating},
    .batch_norm_forward_eval = {batch_norm_forward_eval, backend::kFloating},
    .batch_norm_backward = {batch_norm_backward, backend::kFloating},
};

}  // namespace volt::cuda
