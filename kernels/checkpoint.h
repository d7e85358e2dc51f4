#pragma once
/// @file
/// Activation recomputation (gradient checkpointing): run a piece of the forward without recording its graph,
/// keep only its inputs, and in backward run it again with gradients on and backpropagate through the graph
/// that second run records. Memory for the piece's intermediate activations is traded for one more forward.
///
/// @code
///   Tensor y = autograd::checkpoint([&](const Tensor& x) { return block(x); }, x, block.parameters());
///   // nn/recompute.h: Tensor y = nn::recompute(block, x);   (the same, parameters taken from the module)
/// @endcode
///
/// Contract:
///   - `fn` must compute the same thing twice: the same ops in the same order on inputs with the same values.
///     Its draws from default_generator() (dropout, rand) are replayed: the second run draws from a copy of
///     the generator's state at the first run (under a Graph capture of the segment's device: from the capture's
///     draw position at the first run, kernels/graph.h), so the masks are identical and the generator itself is
///     not advanced twice. A Generator passed to an op explicitly is not replayed (pass none, or pass it in
///     CheckpointOptions::generators). Autocast is restored to its state at the first run.
///   - Gradients are exact: each input and parameter receives the gradient it would receive without
///     recomputation, summed in the same order (bit for bit on the CPU: the second run records the same nodes,
///     and the engine runs them in their creation order).
///   - Tensors `fn` captures that require grad (module weights) must be listed in `params` and must be leaves;
///     their gradients flow back through the checkpoint's node, so they accumulate exactly as without
///     recomputation (and grad-ready hooks, DDP's all-reduce, fire as usual). A captured tensor that requires
///     grad but is not listed is a volt::Error at backward naming the node it reached.
///   - Nothing may modify the inputs or `params` in place between the first run and the backward (fn included):
///     the recomputation would read the new values (there are no version counters to catch it).
///   - create_graph (autograd::grad / autograd::backward) is supported: under it the segment is recomputed from
///     the original inputs with its graph recorded, so higher derivatives flow through it.
///   - With gradients off, or when no input or parameter requires grad, `fn` simply runs (nothing is saved).
///   - Under a Graph capture both runs must be in the same capture (the recomputation in another is an error).
#include <functional>
#include <string>
#include <vector>

#include <volt/kernels/autograd.h>
#include <volt/runtime/generator.h>

namespace volt::autograd {

struct CheckpointOptions {
  /// Replay default_generator()'s draws in the recomputation (PyTorch's preserve_rng_state).
  bool preserve_rng_state = true;
  /// Further generators `fn` draws from explicitly: their (seed, offset) is saved at the first run, set back for
  /// the recomputation and restored afterwards. They must outlive the backward.
  std::vector<Generator*> generators;
  /// The node's name is name + "Backward" (anomaly detection, traces and error messages show it).
  std::string name = "Checkpoint";
};

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// fn(inputs) under no-grad now, recomputed in backward. Undefined inputs are passed through; outputs that are
/// floating point get the checkpoint's node (the others are returned without a graph). Returns fn's outputs.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params = {}, const CheckpointOptions& options = {});

/// One tensor in, one tensor out.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Tensor>& params = {}, const CheckpointOptions& options = {});

}  // namespace volt::autograd
