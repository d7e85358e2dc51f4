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
#include <functional>
#include <optional>
#include <string>
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

/// Inside a backward formula: the op's own output, which the formula captured detached (`out.detach()`). Under
/// create_graph it comes back tied to the node being run (as its output `output_nr`), so a second derivative
/// flows through the op again, as PyTorch's saved outputs do; otherwise it is returned as is.
Tensor saved_output(const Tensor& out, uint32_t output_nr = 0);

/// Inside a backward formula that is linear in the incoming gradient `g` and does not depend on the inputs'
/// values (a copy into a slice, an index or scatter kernel, a fixed mask): `result` was computed from `g` by a
/// kernel. Under create_graph (when `g` requires grad) the result is tied to `g` by a node named `name` whose
/// backward is `adjoint` (the op's own forward map applied to the result's gradient); otherwise it is returned
/// as is.
Tensor linear_in_grad(const Tensor& result, const Tensor& g, const std::string& name,
                      std::function<Tensor(const Tensor&)> adjoint);

/// Inside a backward formula under create_graph, for an op whose fast backward is a fused kernel: the gradients
/// of `composed(inputs)` (the op's forward re-expressed in differentiable ops, returning one tensor per output of
/// the op) weighted by `grads`, recorded so they can be differentiated again. One result per input: undefined
/// for inputs that are undefined or need no gradient.
std::vector<Tensor> composite_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads,
                                       const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& composed);

/// True when `node` was attached with attach_differentiable (or is a gradient accumulator).
bool is_differentiable(const Node& node);

}  // namespace volt::autograd
