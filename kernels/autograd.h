#pragma once
/// @file
/// Define-by-run reverse-mode autograd.
///
/// Each differentiable op that sees an input requiring grad attaches a Node to its output. The Node holds the
/// backward formula (usually a lambda capturing the tensors it needs) and one Edge per input pointing at the
/// Node that produced that input (or at the leaf's gradient accumulator). Tensor::backward() runs the nodes in
/// dependency order, summing the gradients that reach each node, and frees saved tensors afterwards.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt {

struct Edge {
  std::shared_ptr<Node> fn;  ///< null: this input needs no gradient
  uint32_t input_nr = 0;     ///< which output of fn the gradient belongs to
  bool valid() const { return fn != nullptr; }
};

struct InputMeta {  // what the gradient for an input must look like (checked by the engine)
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

struct Node {
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  /// `grads[i]` is the gradient of output i (undefined when no gradient flowed there). Returns one gradient
  /// per entry of next_edges (undefined for inputs that need none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grads) = 0;
  virtual void release() {}  // frees saved state after a backward without retain_graph

  std::vector<Edge> next_edges;
  std::vector<InputMeta> input_meta;  ///< parallel to next_edges
  std::vector<InputMeta> output_meta;  ///< one per output
  uint32_t num_outputs = 1;
  uint64_t sequence_nr = 0;  ///< creation order; later nodes run first when several are ready
  bool released = false;
  std::string anomaly_scope;  ///< anomaly mode only: the module scope the forward op ran in
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

/// A Node whose formula is a lambda. Releasing it destroys the lambda and with it the captured tensors.
struct LambdaNode : Node {
  LambdaNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override;
  void release() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

namespace autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

/// True when grad mode is on and any of `inputs` requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

/// The edge a gradient for `t` must flow along (its grad_fn, or its leaf accumulator, or none).
Edge gradient_edge(const Tensor& t);

/// Connects `outputs` to a new node computing the inputs' gradients with `fn` (which receives one gradient
/// per output, undefined ones replaced by zeros) and marks the outputs as requiring grad.
/// Does nothing when grad mode is off or no input requires grad.
void attach(const std::vector<Tensor>& outputs, const std::string& name, const std::vector<Tensor>& inputs,
            BackwardFn fn);
inline void attach(const Tensor& output, const std::string& name, const std::vector<Tensor>& inputs,
                   BackwardFn fn) {
  attach(std::vector<Tensor>{output}, name, inputs, std::move(fn));
}

/// The sequence_nr the next node created on this thread will get: nodes created between two reads belong to
/// what ran in between (FSDP keys a unit's backward on the range of its forward).
uint64_t next_sequence_nr();

/// Called by the engine before each node's backward formula (gradient accumulators included), on the thread
/// running backward. FSDP re-gathers a unit's parameters here. Costs one null test when none is set.
using PreNodeHook = std::function<void(const Node& node)>;
/// RAII: installs `hook` for this thread while in scope (restoring the previous one).
class PreNodeHookGuard {
 public:
  explicit PreNodeHookGuard(PreNodeHook hook);
  ~PreNodeHookGuard();
  PreNodeHookGuard(const PreNodeHookGuard&) = delete;
  PreNodeHookGuard& operator=(const PreNodeHookGuard&) = delete;

 private:
  PreNodeHook hook_;
  const PreNodeHook* prev_;
};

/// Graph nodes carry a sequence number in creation order; among the nodes whose gradients are complete the
/// engine runs the latest created first, so the order gradients are summed in follows these numbers.
/// reserve_sequence_numbers(count) takes `count` numbers from the process-wide counter (every node created
/// afterwards gets a larger one); while a SequenceRangeScope lives, nodes created on its thread take consecutive
/// numbers from `first` instead. Data-parallel replicas (trainer/strategies/dp.h) each number their graph from
/// their own reserved range, so one backward through all of them sums in the same order however the replica
/// threads interleaved, and training repeats bit for bit.
uint64_t reserve_sequence_numbers(uint64_t count);
class SequenceRangeScope {
 public:
  explicit SequenceRangeScope(uint64_t first);
  ~SequenceRangeScope();
  SequenceRangeScope(const SequenceRangeScope&) = delete;
  SequenceRangeScope& operator=(const SequenceRangeScope&) = delete;

 private:
  bool prev_active_;
  uint64_t prev_next_;
};

/// Runs backward from `roots` seeded with `grads` (same length; undefined = ones for one-element roots).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

// ---- anomaly detection ----------------------------------------------------------------------------------
/// With anomaly detection on (process-wide), every differentiable op checks its forward outputs, and the
/// engine checks every gradient a backward formula returns; the first NaN/Inf throws volt::Error naming the op,
/// the module scope that called it (see ScopeGuard) and its input shapes. Each check reads the tensor on the
/// host (a device sync on GPUs): a debugging aid, off by default (Trainer option detect_anomaly).
bool anomaly_enabled();
void set_detect_anomaly(bool enabled);
/// The innermost module scope (e.g. "encoder.l1 (Linear)"), or "" outside any.
std::string current_scope();
/// Throws the anomaly error for `op` (forward) when any defined floating output holds NaN/Inf. Called by
/// attach(); ops that attach no node may call it themselves.
void check_forward_outputs(const std::string& op, const std::vector<Tensor>& outputs,
                           const std::vector<Tensor>& inputs);

/// RAII: names the module scope ops run in while anomaly detection is on (nn::UnaryModule::operator() opens
/// one per call). Costs one flag test when detection is off.
class ScopeGuard {
 public:
  /// `name` is evaluated only when detection is on.
  template <class NameFn>
  explicit ScopeGuard(NameFn&& name) : active_(anomaly_enabled()) {
    if (active_) push(name());
  }
  ~ScopeGuard() {
    if (active_) pop();
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  static void push(std::string name);
  static void pop();
  bool active_;
};

}  // namespace autograd

/// RAII: disables gradient recording in this scope (optimizer updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// RAII: turns anomaly detection on (or off) in this scope, restoring the previous setting.
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : prev_(autograd::anomaly_enabled()) {
    autograd::set_detect_anomaly(enabled);
  }
  ~DetectAnomalyGuard() { autograd::set_detect_anomaly(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  explicit EnableGradGuard(bool enabled = true) : prev_(autograd::grad_enabled()) {
    autograd::set_grad_enabled(enabled);
  }
  ~EnableGradGuard() { autograd::set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace volt
