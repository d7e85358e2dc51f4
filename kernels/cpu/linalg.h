#pragma once
// Backend functions for GEMM, convolution, pooling and batch norm. kernels/cpu implements volt::cpu::*,
// kernels/cuda (cuBLAS / cuDNN) the same names in volt::cuda::*. The public ops in kernels/ops/linalg_ops.cpp
// and conv_ops.cpp check arguments first; backends may assume valid, same-device, same-dtype inputs.
#include <cstdint>

#include <volt/kernels/tensor.h>

namespace volt {

// One (possibly batched) row-major GEMM: for b in [0, batch):
//   C_b (m, n) = alpha * op(A_b) (m, k) @ op(B_b) (k, n) + beta * C_b
// op(X) = X when !trans, X^T when trans. Every matrix is row-major with a leading dimension (the distance
// between rows of the stored matrix): A is stored (m, k) when !trans_a, (k, m) when trans_a; likewise B.
// `a`, `b`, `c` are tensors whose data_ptr() is the first element of batch 0; batch b starts
// stride_* elements further (stride 0 broadcasts one matrix over the batch).
struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
  bool allow_tf32 = false;  // CUDA f32 only: TF32 tensor-core math
};

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
};

struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

#define VOLT_LINALG_DECLS                                                                                   \
  void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c);                          \
  /* x (N, C, H, W), weight (OC, C, KH, KW), bias (OC) or undefined -> out (N, OC, OH, OW); contiguous */  \
  void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,         \
                      const Conv2dParams& p);                                                               \
  /* Writes the gradients whose tensors are defined; all contiguous. (The bias gradient is a reduction the */ \
  /* op layer computes itself.) */                                                                          \
  void conv2d_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out,             \
                       const Tensor& x, const Tensor& weight, const Conv2dParams& p);                       \
  /* indices (i64, same shape as out): flat h*W+w of each max; the CPU fills it, CUDA leaves it undefined */ \
  void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p); \
  void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out, \
                           const Tensor& indices, const Pool2dParams& p);                                   \
  /* Averages count padding (PyTorch's count_include_pad=True default). x/out: saved on CUDA (cuDNN's   \
     backward signature takes them), undefined on the CPU. */                                               \
  void avg_pool2d_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p);                       \
  void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out, \
                           const Pool2dParams& p);                                                          \
  /* x, out: contiguous (N, C, S) viewed as 4-D (N, C, S, 1). weight/bias (C) always defined. Training:    \
     save_mean/save_invstd (C) receive the batch mean and 1/sqrt(biased var + eps); running stats (C),   \
     when defined, are updated in place: r = (1 - momentum) r + momentum * stat (unbiased var). */        \
  void batch_norm_forward_train(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,     \
                                const Tensor& x, const Tensor& weight, const Tensor& bias,                 \
                                const Tensor& running_mean, const Tensor& running_var, double momentum,     \
                                double eps);                                                                \
  void batch_norm_forward_eval(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, \
                               const Tensor& running_mean, const Tensor& running_var, double eps);         \
  /* Training-mode backward from the saved batch statistics. */                                           \
  void batch_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,       \
                           const Tensor& grad_out, const Tensor& x, const Tensor& weight,                  \
                           const Tensor& save_mean, const Tensor& save_invstd, double eps);

namespace cpu {
VOLT_LINALG_DECLS
// gemm on raw host pointers (f32 or f64), for kernels that build their own operands (im2col).
void gemm_ptr(const GemmDesc& d, DType dtype, const void* a, const void* b, void* c);
}  // namespace cpu
namespace cuda { VOLT_LINALG_DECLS }
#undef VOLT_LINALG_DECLS

}  // namespace volt
