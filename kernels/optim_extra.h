#pragma once
/// @file
/// Fused RMSprop, Adagrad and Lion updates (kernels/ops/optim_ops.cpp), the ops behind the optimizers in
/// nn/optimizers.h, beside sgd_step_ / adam_step_ (kernels/ops.h) and with their contract: ONE pass over
/// (param, grad, state...) per parameter, in place, no allocation, outside autograd (the tensors must not require
/// grad while grad mode is on); the per-element math is kernels/common/optim_math_extra.h, shared by the CPU and
/// CUDA kernels. param and grad: contiguous, same shape, floating dtype and device. State tensors: the param's
/// shape and device, contiguous, all of one dtype, the param's or f32 for an f16/bf16 param; undefined where
/// unused (RMSprop's momentum_buffer when momentum == 0, grad_avg unless centered).
///
/// The multi-tensor forms update every listed parameter with one set of hyperparameters (one step count), in ONE
/// kernel launch on a GPU (chunked as kernels/common/multi_tensor.h plans it; a loop on the CPU); every entry
/// shares the first one's device, param dtype and state dtype, and a parameter may appear once. The
/// single-tensor forms are lists of one.
#include <vector>

#include <volt/kernels/optim_extra_hyper.h>
#include <volt/kernels/tensor.h>

namespace volt {

void rmsprop_step_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& momentum_buffer,
                   const Tensor& grad_avg, const RmspropHyper& h);
void adagrad_step_(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradHyper& h);
void lion_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionHyper& h);

void rmsprop_step_multi_(const std::vector<RmspropTensors>& list, const RmspropHyper& h);
void adagrad_step_multi_(const std::vector<AdagradTensors>& list, const AdagradHyper& h);
void lion_step_multi_(const std::vector<LionTensors>& list, const LionHyper& h);

}  // namespace volt
