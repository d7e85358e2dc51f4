#pragma once
/// @file
/// The hyperparameters and tensors of one fused RMSprop, Adagrad or Lion update (kernels/optim_extra.h), as the
/// optimizers in nn/optimizers.h fill them from a parameter group each step.
#include <cstdint>

#include <volt/kernels/tensor.h>

namespace volt {

/// torch.optim.RMSprop: square_avg = alpha * square_avg + (1 - alpha) * g^2, centered subtracts grad_avg^2.
struct RmspropHyper {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

/// torch.optim.Adagrad: the step's lr is lr / (1 + (step - 1) * lr_decay).
struct AdagradHyper {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double eps = 1e-10;
  int64_t step = 1;  ///< the step being taken (1 for the first update)
};

/// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; lion-pytorch): decoupled weight decay,
/// p -= lr * sign(beta1 * m + (1 - beta1) * g), then m = beta2 * m + (1 - beta2) * g.
struct LionHyper {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
};

/// One parameter of a multi-tensor RMSprop update.
struct RmspropTensors {
  Tensor param, grad, square_avg;
  Tensor momentum_buffer;  ///< undefined when momentum == 0
  Tensor grad_avg;         ///< undefined unless centered
};
/// One parameter of a multi-tensor Adagrad update (`sum`: the running sum of squared gradients).
struct AdagradTensors {
  Tensor param, grad, sum;
};
/// One parameter of a multi-tensor Lion update.
struct LionTensors {
  Tensor param, grad, exp_avg;
};

}  // namespace volt
