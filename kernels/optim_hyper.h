#pragma once
/// @file
/// The hyperparameters of one fused optimizer update (kernels/ops.h: sgd_step_, adam_step_), as the optimizers
/// in nn/optim.h fill them from a parameter group each step.
#include <cstdint>

#include <volt/kernels/tensor.h>

namespace volt {

/// Host-side description of one Adam/AdamW step; the loop sees only the derived AdamScalars.
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  ///< AdamW: p *= 1 - lr * wd, instead of g += wd * p
  bool amsgrad = false;
  int64_t step = 1;  ///< the step being taken (1 for the first update), for bias correction
  /// bf16 parameters only: round each updated value up or down at random, with the probability that makes the
  /// rounding unbiased, instead of to nearest (an update smaller than half a bf16 step then still moves the
  /// parameter on average). The bits come from Philox keyed by (rounding_seed, the tensor's
  /// AdamTensors::index) at counter (step, element): the same seed and step give the same parameters.
  bool stochastic_rounding = false;
  uint64_t rounding_seed = 0;
};

struct SgdHyper {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  ///< the momentum buffer is initialised to the (decayed) gradient
};

/// One parameter of a multi-tensor Adam/AdamW update (adam_step_multi_): the tensors adam_step_ takes.
struct AdamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq;
  Tensor max_exp_avg_sq;  ///< undefined without amsgrad
  int64_t index = 0;      ///< stochastic rounding: the parameter's key (its index in its group)
};
/// One parameter of a multi-tensor SGD update (sgd_step_multi_).
struct SgdTensors {
  Tensor param, grad;
  Tensor momentum_buffer;  ///< undefined when momentum == 0
};
}  // namespace volt
