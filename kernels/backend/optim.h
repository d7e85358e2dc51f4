#pragma once
// Fused optimizer updates and the mixed-precision unscale (kernels/ops/optim_ops.cpp;
// kernels/cpu/optim.cpp, kernels/cuda/optim.cu): one pass over (param, grad, state...) per parameter tensor, in
// place, no allocation; the updates take a list of parameters so that a GPU updates a whole group in one
// launch. The per-element math is kernels/common/optim_math.h.
//
// Contract (checked by the ops): every tensor is contiguous and on one device; param and grad have the same shape
// and dtype (f32, f64, f16 or bf16); the state tensors have the param's shape and dtype acc_t<param dtype> (f32
// for f16/bf16 params), so that low-precision parameters keep full-precision moments, or, when the optimizer opts
// out (fp32_state = false), the param's own dtype. The update is computed in acc_t either way; the state tensors'
// dtype tells the kernels which storage type to use. Undefined state tensors are allowed where the update does
// not use them (max_exp_avg_sq without amsgrad, momentum_buffer with momentum == 0).
#include <vector>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/optim_extra_hyper.h>
#include <volt/kernels/optim_hyper.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct OptimKernels {
  // Adam / AdamW step (h says which) of every listed parameter: one launch on a GPU for the whole list (chunked
  // as kernels/common/multi_tensor.h plans it), a loop on the CPU; the single-tensor op passes a list of one.
  // Every entry has the first one's param dtype and state dtype (the op checks). Dispatch dtype: the first
  // param's (floating).
  // `dynamic`: null, or device memory holding the step's scalars (optim_math::DynamicAdamScalars) that replace
  // those made from h (a graph-captured step; kernels/graph.h); h's flags still apply.
  Kernel<void(const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic)> adam_step;
  // SGD step with optional momentum, dampening, Nesterov and weight decay, over a list as adam_step.
  // Dispatch dtype: the first param's (floating).
  // `dynamic`: as adam_step's, optim_math::DynamicSgdScalars.
  Kernel<void(const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic)> sgd_step;
  // RMSprop, Adagrad and Lion steps over a list as adam_step (per-element math:
  // kernels/common/optim_math_extra.h). Unused state tensors are undefined (RMSprop's momentum_buffer without
  // momentum, grad_avg unless centered). No graph-captured form. Dispatch dtype: the first param's (floating).
  Kernel<void(const std::vector<RmspropTensors>& list, const RmspropHyper& h)> rmsprop_step;
  Kernel<void(const std::vector<AdagradTensors>& list, const AdagradHyper& h)> adagrad_step;
  Kernel<void(const std::vector<LionTensors>& list, const LionHyper& h)> lion_step;
  // Every listed gradient (contiguous, floating, all of the first one's dtype) *= inv_scale, in one launch on a
  // GPU; found (f32 scalar, same device) is set to 1 when any element was inf/NaN and left as it is otherwise (so
  // one flag collects a whole list of gradients). Dispatch dtype: the first gradient's (floating).
  Kernel<void(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found)> unscale_check;
  // out (0-d f64, same device) is combined with the p-norm partial of every listed tensor (contiguous, all of
  // the first one's dtype), computed in double: out += sum |x|^p for finite p (x*x for p == 2), out = max(out,
  // max |x|) for p = INFINITY, with NaN propagating. Gradient clipping's total norm. Dispatch dtype: the first
  // tensor's (floating).
  Kernel<void(const std::vector<Tensor>& list, double p, const Tensor& out)> norm_partial;
  // Every listed tensor (contiguous, all of the first one's dtype) *= coef, a 0-d f64 on the same device read
  // there (no host sync), rounded to the tensors' dtype first, so that the result equals mul_ by a 0-d tensor of
  // that dtype. Gradient clipping's rescale. A 0-d f32 coef is used as it is instead (not rounded to f16/bf16):
  // fused_cross_entropy scales a half gradient by an f32 upstream gradient. A coefficient of exactly 1 writes
  // nothing. Dispatch dtype: the first tensor's (floating).
  Kernel<void(const std::vector<Tensor>& list, const Tensor& coef)> scale_by;
};

template <>
struct Family<OptimKernels> {
  static constexpr const char* name = "optim";
  static constexpr std::tuple kernels{Named{&OptimKernels::adam_step, "adam_step"},
                                      Named{&OptimKernels::sgd_step, "sgd_step"},
                                      Named{&OptimKernels::rmsprop_step, "rmsprop_step"},
                                      Named{&OptimKernels::adagrad_step, "adagrad_step"},
                                      Named{&OptimKernels::lion_step, "lion_step"},
                                      Named{&OptimKernels::unscale_check, "unscale_check"},
                                      Named{&OptimKernels::norm_partial, "norm_partial"},
                                      Named{&OptimKernels::scale_by, "scale_by"}};
};

}  // namespace volt::backend
