#pragma once
/// @file
/// Activation recomputation for a module: nn::recompute(m, x) is m(x) whose intermediate activations are not
/// kept; backward runs m again (autograd::checkpoint, `volt/kernels/checkpoint.h`, which states the contract).
/// m's parameters are passed as the checkpoint's params, so their gradients accumulate exactly as with m(x).
/// m must outlive the backward, and its call must compute the same thing twice (dropout masks are replayed).
#include <volt/kernels/checkpoint.h>
#include <volt/nn/module.h>

namespace volt::nn {

inline Tensor recompute(UnaryModule& m, const Tensor& x, const autograd::CheckpointOptions& options = {}) {
  autograd::CheckpointOptions o = options;
  if (o.name == "Checkpoint") o.name = m.type_name() + "Checkpoint";  // node "GPT2BlockCheckpointBackward"
  return autograd::checkpoint([&m](const Tensor& in) { return m(in); }, x, m.parameters(), o);
}

}  // namespace volt::nn
