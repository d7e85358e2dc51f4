#pragma once
// Fused optimizer updates: one pass over (param, grad, state...) per parameter tensor, in place, no
// allocation. Declared for both backends; nn/optim.cpp picks one with VOLT_DISPATCH_DEVICE.
//
// Contract (checked by the caller, nn/optim.cpp): every tensor is contiguous and on one device; param and grad
// have the same shape and dtype (f32, f64, f16 or bf16); the state tensors have the param's shape and dtype
// acc_t<param dtype> (f32 for f16/bf16 params), so that low-precision parameters keep full-precision moments,
// or, when the optimizer opts out (fp32_state = false), the param's own dtype. The update is computed in
// acc_t either way; the state tensors' dtype tells the kernels which storage type to use.
// Undefined state tensors are allowed where the update does not use them (max_exp_avg_sq without amsgrad,
// momentum_buffer with momentum == 0).
#include <volt/kernels/backend.h>
#include <volt/kernels/common/optim_math.h>

namespace volt {

#define VOLT_OPTIM_DECLS                                                                                   \
  void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, \
                 const Tensor& max_exp_avg_sq, const AdamHyper& h);                                        \
  void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h);     \
  /* grad (contiguous, floating) *= inv_scale in one pass; found (f32 scalar, same device) is set to 1 when */ \
  /* any element was inf/NaN and left as it is otherwise (so one flag collects a whole list of gradients). */  \
  void unscale_check(const Tensor& grad, double inv_scale, const Tensor& found);

namespace cpu { VOLT_OPTIM_DECLS }
namespace cuda { VOLT_OPTIM_DECLS }
#undef VOLT_OPTIM_DECLS

}  // namespace volt
