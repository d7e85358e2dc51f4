#pragma once
/// @file
/// Higher-order gradients: autograd::grad (gradients of outputs with respect to chosen inputs, returned rather
/// than accumulated into .grad), autograd::backward with create_graph, and the attach variant for ops whose
/// backward formula is itself differentiable.
///
/// With create_graph the engine runs every backward formula with gradient recording on, so the gradients it
/// returns carry their own graph: a gradient penalty, a PDE residual built from input derivatives, a
/// Hessian-vector product or a MAML inner step can be differentiated again. A formula can only be recorded if it
/// is written in differentiable ops over the op's (non-detached) inputs; ops declare that by attaching their
/// node with attach_differentiable. Passing a create_graph backward through any other node still computes the
/// first gradient, but the gradient it returns is tied to a node that throws, naming the op, if anything ever
/// backpropagates through it: the graph is never lost silently.
#include <optional>
#include <vector>

#include <volt/kernels/autograd.h>

namespace volt::autograd {

struct GradOptions {
  /// Keep the graph for another backward; defaults to create_graph (as in PyTorch).
  std::optional<bool> retain_graph;
  /// Record the backward formulas, so the returned gradients are differentiable.
  bool create_graph = false;
  /// An input the outputs do not depend on gets an undefined gradient instead of an error.
  bool allow_unused = false;
  /// An input the outputs do not depend on gets zeros (implies allow_unused).
  bool materialize_grads = false;
};

/// The gradients of `outputs` (weighted by `grad_outputs`: one per output, undefined = ones for one-element
/// outputs) with respect to `inputs`, one per input. Nothing is accumulated into any tensor's .grad, and only
/// the part of the graph between the outputs and the inputs runs. Inputs may be leaves or intermediate results.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, const GradOptions& options = {});
/// One output, one input.
Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output = Tensor(),
            const GradOptions& options = {});

/// Tensor::backward for several roots, with create_graph: the leaves' .grad then carry a graph.
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

/// True while the engine runs backward formulas with create_graph (formulas that keep a fast, non-differentiable
/// path test this to take the differentiable one).
bool create_graph_enabled();

/// attach() for ops whose formula is written in differentiable ops over inputs the formula captured without
/// detaching them (a formula must not capture the op's own output undetached: that is a reference cycle; under
/// create_graph_enabled() it recomputes what it needs from the inputs instead).
void attach_differentiable(const std::vector<Tensor>& outputs, const std::string& name,
                           const std::vector<Tensor>& inputs, BackwardFn fn);
inline void attach_differentiable(const Tensor& output, const std::string& name, const std::vector<Tensor>& inputs,
                                  BackwardFn fn) {
  attach_differentiable(std::vector<Tensor>{output}, name, inputs, std::move(fn));
}

/// True when `node` was attached with attach_differentiable (or is a gradient accumulator).
bool is_differentiable(const Node& node);

}  // namespace volt::autograd
