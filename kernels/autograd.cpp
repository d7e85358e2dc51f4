#include <volt/kernels/autograd.h>
#include <volt/kernels/grad.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <queue>
#include <unordered_map>

#include <volt/kernels/ops.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/trace.h>

namespace volt {

namespace {

thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_sequence{0};
std::atomic<bool> g_anomaly{false};
thread_local std::vector<std::string> t_scopes;
thread_local const autograd::PreNodeHook* t_pre_node_hook = nullptr;
thread_local bool t_seq_active = false;  // a SequenceRangeScope numbers this thread's nodes
thread_local uint64_t t_seq_next = 0;
thread_local bool t_create_graph = false;  // the running backward records its formulas (create_graph)
thread_local const std::shared_ptr<Node>* t_running_node = nullptr;  // the node whose formula is running

uint64_t take_sequence_nr() { return t_seq_active ? t_seq_next++ : g_sequence.fetch_add(1); }

std::string shapes_of(const std::vector<InputMeta>& metas) {
  std::string s;
  for (const InputMeta& m : metas) s += (s.empty() ? "" : ", ") + shape_to_string(m.shape);
  return s.empty() ? "none" : s;
}

std::string scope_phrase(const std::string& scope) {
  return scope.empty() ? "outside any module" : "in module " + scope;
}

// Strips the "Backward" suffix of a node name to name the forward op.
std::string forward_name(const std::string& node_name) {
  const std::string suffix = "Backward";
  if (node_name.size() > suffix.size() && node_name.compare(node_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return node_name.substr(0, node_name.size() - suffix.size());
  return node_name;
}

thread_local bool t_checking = false;  // the finiteness check runs ops itself: they are not checked again
thread_local int t_backward_depth = 0;  // inside run_backward, ops are parts of backward formulas

struct BackwardDepth {
  BackwardDepth() { ++t_backward_depth; }
  ~BackwardDepth() { --t_backward_depth; }
};

struct Checking {
  Checking() { t_checking = true; }
  ~Checking() { t_checking = false; }
};

// Floating tensors: no NaN/Inf (other dtypes: true).
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return true;
  NoGradGuard ng;
  Tensor x = t.detach().to(DType::f32);
  // x - x is 0 for finite values and NaN for NaN and +-Inf: one reduction answers both questions.
  return std::isfinite(sum(sub(x, x)).item<float>());
}

bool finite_or_undefined(const Tensor& t) {
  if (!t.defined() || t_checking) return true;
  Checking checking;
  return all_finite(t);
}

// Sums the gradient contributions for a leaf, stores them in .grad and fires the grad-ready hooks.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    auto impl = leaf_.lock();
    if (!impl || !grads[0].defined()) return {};
    Tensor leaf(impl);
    AutogradMeta& m = impl->meta();
    if (t_create_graph) {
      // create_graph: .grad keeps the gradient's graph (a gradient penalty differentiates it again).
      m.grad = m.grad.defined() ? add(m.grad, grads[0]) : grads[0];
    } else if (!m.grad.defined()) {
      // Keep the incoming tensor only if nothing else can see it or its storage (the engine hands over its
      // last handle): otherwise in-place updates of one parameter's grad (clipping, scaling) would leak into
      // another tensor. Non-contiguous views are copied so optimizers get dense gradients.
      Tensor& in = grads[0];
      const bool unique = in.impl_ptr().use_count() == 1 && in.storage().use_count() == 1 && !in.impl()->autograd &&
                          in.is_contiguous();
      m.grad = unique ? std::move(in) : in.detach().clone();
    } else {
      m.grad = add(m.grad, grads[0].detach());
    }
    auto hooks = m.grad_ready_hooks;  // copy: a hook may remove itself
    for (auto& [id, hook] : hooks) hook(leaf);
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// A node whose formula is written in differentiable ops (attach_differentiable): under create_graph the engine
// runs it with gradient recording on.
struct DifferentiableNode : LambdaNode {
  using LambdaNode::LambdaNode;
};

// Stands in, under create_graph, for the graph of a backward formula that cannot be recorded: the gradients
// such a node returned are tied to this one, which throws when anything backpropagates through them.
struct NotDifferentiableNode : Node {
  explicit NotDifferentiableNode(std::string op) : op_(std::move(op)) {}
  std::string name() const override { return op_ + "DoubleBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&) override {
    VOLT_FAIL("autograd: the second derivative through ", forward_name(op_), " is not implemented: its backward "
              "formula (", op_, ") is not differentiable, so the gradient computed with create_graph=true cannot "
              "be differentiated again. docs/autograd.md lists the ops with double backward");
  }

 private:
  std::string op_;
};

}  // namespace

std::vector<Tensor> LambdaNode::apply(std::vector<Tensor>& grads) {
  VOLT_CHECK(fn_ != nullptr, "backward: the graph through ", name_,
             " was already freed by an earlier backward(); call backward(gradient, /*retain_graph=*/true) "
             "the first time to backpropagate through it twice");
  for (size_t i = 0; i < grads.size(); ++i) VOLT_ASSERT(grads[i].defined(), name_, ": missing grad");
  return fn_(grads);
}

namespace autograd {

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

uint64_t reserve_sequence_numbers(uint64_t count) { return g_sequence.fetch_add(count); }

SequenceRangeScope::SequenceRangeScope(uint64_t first) : prev_active_(t_seq_active), prev_next_(t_seq_next) {
  t_seq_active = true;
  t_seq_next = first;
}
SequenceRangeScope::~SequenceRangeScope() {
  t_seq_active = prev_active_;
  t_seq_next = prev_next_;
}

bool anomaly_enabled() { return g_anomaly.load(std::memory_order_relaxed); }
void set_detect_anomaly(bool enabled) { g_anomaly.store(enabled, std::memory_order_relaxed); }
std::string current_scope() { return t_scopes.empty() ? std::string() : t_scopes.back(); }
void ScopeGuard::push(std::string name) { t_scopes.push_back(std::move(name)); }
void ScopeGuard::pop() {
  if (!t_scopes.empty()) t_scopes.pop_back();
}

void check_forward_outputs(const std::string& op, const std::vector<Tensor>& outputs,
                           const std::vector<Tensor>& inputs) {
  // Inside backward the engine checks each formula's result as a whole and names its node.
  if (t_checking || t_backward_depth > 0) return;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (finite_or_undefined(outputs[i])) continue;
    std::vector<InputMeta> metas;
    for (const Tensor& in : inputs) metas.push_back({in.defined() ? in.shape() : Shape{}, DType::f32, kCPU});
    bool inputs_finite = true;
    for (const Tensor& in : inputs) inputs_finite = inputs_finite && finite_or_undefined(in);
    VOLT_FAIL("detect_anomaly: the forward of ", op, " ", scope_phrase(current_scope()), " produced NaN/Inf in ",
              outputs.size() > 1 ? "output " + std::to_string(i) : std::string("its output"), " of shape ",
              outputs[i].shape_str(), " (input shapes: ", shapes_of(metas), "; the inputs are ",
              inputs_finite ? "all finite" : "already non-finite", ")");
  }
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  AutogradMeta& m = *t.impl()->autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  if (!m.requires_grad) return {};
  if (!m.grad_accumulator) {
    m.grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
    // Accumulators run as soon as their gradient is complete (before any other ready node), so grad-ready
    // hooks fire while backward continues: DDP launches each bucket's all-reduce as early as possible.
    m.grad_accumulator->sequence_nr = UINT64_MAX;
  }
  return {m.grad_accumulator, 0};
}

namespace {
void attach_node(const std::vector<Tensor>& outputs, const std::string& name, const std::vector<Tensor>& inputs,
                 BackwardFn fn, bool differentiable) {
  const bool anomaly = anomaly_enabled();
  if (anomaly) check_forward_outputs(forward_name(name), outputs, inputs);
  if (!any_requires_grad(inputs)) return;
  std::shared_ptr<LambdaNode> node = differentiable ? std::make_shared<DifferentiableNode>(name, std::move(fn))
                                                    : std::make_shared<LambdaNode>(name, std::move(fn));
  if (anomaly) node->anomaly_scope = current_scope();
  else if (trace::active(trace::Layer::module)) node->anomaly_scope = trace::current_module();  // backward ranges per module
  node->sequence_nr = take_sequence_nr();
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (const Tensor& in : inputs) {
    node->next_edges.push_back(gradient_edge(in));
    if (in.defined())
      node->input_meta.push_back({in.shape(), in.dtype(), in.device()});
    else
      node->input_meta.push_back({});
  }
  for (const Tensor& out : outputs) node->output_meta.push_back({out.shape(), out.dtype(), out.device()});
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& m = outputs[i].impl()->meta();
    m.grad_fn = node;
    m.output_nr = i;
    m.requires_grad = true;
  }
}
}  // namespace

void attach(const std::vector<Tensor>& outputs, const std::string& name, const std::vector<Tensor>& inputs,
            BackwardFn fn) {
  attach_node(outputs, name, inputs, std::move(fn), false);
}

void attach_differentiable(const std::vector<Tensor>& outputs, const std::string& name,
                           const std::vector<Tensor>& inputs, BackwardFn fn) {
  attach_node(outputs, name, inputs, std::move(fn), true);
}

bool is_differentiable(const Node& node) {
  return dynamic_cast<const DifferentiableNode*>(&node) != nullptr ||
         dynamic_cast<const AccumulateGrad*>(&node) != nullptr;
}

bool create_graph_enabled() { return t_create_graph; }

Tensor saved_output(const Tensor& out, uint32_t output_nr) {
  if (!t_create_graph || !t_running_node || !out.defined()) return out;
  const std::shared_ptr<Node>& node = *t_running_node;
  VOLT_ASSERT(output_nr < node->num_outputs, "saved_output: output ", output_nr, " of ", node->name());
  Tensor t = out.detach();
  AutogradMeta& m = t.impl()->meta();
  m.grad_fn = node;
  m.output_nr = output_nr;
  m.requires_grad = true;
  return t;
}

std::vector<Tensor> composite_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads,
                                       const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& composed) {
  VOLT_ASSERT(t_create_graph, "composite_backward runs only inside a backward with create_graph");
  std::vector<Tensor> outs = composed(inputs);
  VOLT_ASSERT(outs.size() == grads.size(), "composite_backward: ", outs.size(), " outputs for ", grads.size(),
              " gradients");
  std::vector<Tensor> roots, seeds, wrt;
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].defined() && outs[i].requires_grad() && grads[i].defined()) {
      roots.push_back(outs[i]);
      seeds.push_back(grads[i].dtype() == outs[i].dtype() ? grads[i] : grads[i].to(outs[i].dtype()));
    }
  std::vector<size_t> slot;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) {
      wrt.push_back(inputs[k]);
      slot.push_back(k);
    }
  std::vector<Tensor> result(inputs.size());
  if (roots.empty() || wrt.empty()) return result;
  std::vector<Tensor> g = grad(roots, wrt, seeds, {.retain_graph = true, .create_graph = true, .allow_unused = true});
  for (size_t j = 0; j < slot.size(); ++j) result[slot[j]] = g[j];
  return result;
}

Tensor linear_in_grad(const Tensor& result, const Tensor& g, const std::string& name,
                      std::function<Tensor(const Tensor&)> adjoint) {
  if (!t_create_graph || !result.defined() || !g.defined() || !g.requires_grad()) return result;
  Tensor r = result.detach();
  attach_differentiable(r, name, {g}, [adjoint = std::move(adjoint)](const std::vector<Tensor>& gg) {
    return std::vector<Tensor>{adjoint(gg[0])};
  });
  return r;
}

uint64_t next_sequence_nr() { return t_seq_active ? t_seq_next : g_sequence.load(); }

PreNodeHookGuard::PreNodeHookGuard(PreNodeHook hook) : hook_(std::move(hook)), prev_(t_pre_node_hook) {
  t_pre_node_hook = hook_ ? &hook_ : nullptr;
}
PreNodeHookGuard::~PreNodeHookGuard() { t_pre_node_hook = prev_; }

namespace {

// What autograd::grad asks of the engine: the gradient reaching each of `edges` is captured (summed over every
// path) instead of flowing on; gradient accumulators never run, and only nodes leading to a captured edge run.
struct Captures {
  std::vector<Edge> edges;
  std::vector<Tensor> grads;  // parallel to edges; undefined: nothing reached it
};

// Under create_graph, ties the gradients a non-differentiable formula returned to a node that throws when
// backpropagated through (see NotDifferentiableNode).
void poison_gradients(const Node& node, std::vector<Tensor>& in_grads, const std::vector<Tensor>& incoming) {
  auto poison = std::make_shared<NotDifferentiableNode>(node.name());
  poison->sequence_nr = take_sequence_nr();
  for (size_t i = 0; i < node.next_edges.size(); ++i) {
    poison->next_edges.push_back(node.next_edges[i]);
    poison->input_meta.push_back(node.input_meta[i]);
  }
  for (const Tensor& g : incoming)
    if (g.defined() && g.requires_grad()) {
      poison->next_edges.push_back(gradient_edge(g));
      poison->input_meta.push_back({g.shape(), g.dtype(), g.device()});
    }
  bool any_edge = false;
  for (const Edge& e : poison->next_edges) any_edge = any_edge || e.valid();
  if (!any_edge) return;
  uint32_t nr = 0;
  for (Tensor& g : in_grads) {
    if (!g.defined()) continue;
    g = g.detach();  // a fresh handle: the formula may have returned an alias of an incoming gradient
    poison->output_meta.push_back({g.shape(), g.dtype(), g.device()});
    AutogradMeta& m = g.impl()->meta();
    m.grad_fn = poison;
    m.output_nr = nr++;
    m.requires_grad = true;
  }
  poison->num_outputs = nr;
}

// Checks the roots of a backward and pairs each root's edge with its seed gradient (ones for a one-element
// root given no gradient).
std::vector<std::pair<Edge, Tensor>> seed_roots(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    VOLT_CHECK(r.defined(), "backward: output ", i, " is undefined");
    VOLT_CHECK(r.requires_grad(), "backward: ", roots.size() > 1 ? "output " + std::to_string(i) + " " : std::string("the tensor "),
               "does not require grad and has no grad_fn; did you compute it under no_grad, or forget "
               "set_requires_grad(true) on the parameters?");
    Tensor g = grads[i];
    if (!g.defined()) {
      VOLT_CHECK(r.numel() == 1, "backward: a gradient can be implied only for a one-element output, but "
                 "the output has shape ", r.shape_str(), "; pass a gradient of that shape");
      g = ones_like(r);
    } else {
      VOLT_CHECK(g.shape() == r.shape(), "backward: gradient shape ", g.shape_str(),
                 " does not match the output shape ", r.shape_str());
      VOLT_CHECK(g.device() == r.device(), "backward: gradient is on ", g.device().str(),
                 " but the output is on ", r.device().str());
    }
    seeds.emplace_back(gradient_edge(r), g);
  }
  return seeds;
}

// Sets t_create_graph for the length of one backward.
struct CreateGraphScope {
  bool prev = t_create_graph;
  explicit CreateGraphScope(bool on) { t_create_graph = on; }
  ~CreateGraphScope() { t_create_graph = prev; }
};

// Makes `node` the one whose formula is running (saved_output reads it) until the scope ends.
struct RunningNodeScope {
  const std::shared_ptr<Node>* prev = t_running_node;
  explicit RunningNodeScope(const std::shared_ptr<Node>& node) { t_running_node = &node; }
  ~RunningNodeScope() { t_running_node = prev; }
};

// One backward pass over the graph below a set of roots: nodes run in dependency order (latest created first
// among the ready ones), each node's incoming gradients summed in a buffer until all its parents have run.
class GraphTask {
 public:
  GraphTask(bool retain_graph, bool create_graph, Captures* captures)
      : retain_graph_(retain_graph), create_graph_(create_graph), captures_(captures) {}

  void run(const std::vector<std::pair<Edge, Tensor>>& seeds) {
    count_dependencies(seeds);
    if (captures_) mark_needed();
    for (auto& [e, g] : seeds)
      if (e.valid()) accumulate(e, g);
    for (auto& [e, g] : seeds)
      if (e.valid() && deps_[e.fn.get()] == 0) {
        ready_.push(e.fn);
        deps_[e.fn.get()] = -1;  // queued
      }
    while (!ready_.empty()) {
      std::shared_ptr<Node> node = ready_.top();
      ready_.pop();
      process(node);
    }
  }

 private:
  struct Pending {
    std::shared_ptr<Node> node;
    std::vector<Tensor> grads;
  };
  struct LaterFirst {
    bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
      return a->sequence_nr < b->sequence_nr;  // highest sequence (latest created) first
    }
  };

  // Counts, for every node reachable from the roots, how many edges lead into it.
  void count_dependencies(const std::vector<std::pair<Edge, Tensor>>& seeds) {
    std::vector<Node*> stack;
    std::unordered_map<Node*, bool> seen;
    for (auto& [e, g] : seeds)
      if (e.valid() && !seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      order_.push_back(n);
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        deps_[e.fn.get()]++;
        if (!seen[e.fn.get()]) {
          seen[e.fn.get()] = true;
          stack.push_back(e.fn.get());
        }
      }
    }
  }

  // autograd::grad: a node runs only when a captured edge lies below it. A node is needed when it is captured
  // or any child is needed: iterate to a fixed point (graphs are small compared with the work of their
  // formulas; each pass is linear).
  void mark_needed() {
    std::unordered_map<Node*, bool> captured_node;
    for (const Edge& e : captures_->edges) captured_node[e.fn.get()] = true;
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
        Node* n = *it;
        if (needed_[n]) continue;
        bool need = captured_node.count(n) > 0;
        for (const Edge& e : n->next_edges)
          if (e.valid() && needed_[e.fn.get()]) need = true;
        if (need) {
          needed_[n] = true;
          changed = true;
        }
      }
    }
  }

  void accumulate(const Edge& e, const Tensor& g) {
    Pending& p = buffers_[e.fn.get()];
    if (!p.node) {
      p.node = e.fn;
      p.grads.resize(e.fn->num_outputs);
    }
    Tensor& slot = p.grads[e.input_nr];
    slot = slot.defined() ? add(slot, g) : g;
  }

  void process(const std::shared_ptr<Node>& node) {
    auto buf = buffers_.find(node.get());
    const bool reached = buf != buffers_.end();  // some gradient arrived (otherwise only undefined ones did)
    Pending p;
    if (reached) {
      p = std::move(buf->second);
      buffers_.erase(buf);
    }
    if (captures_ && reached) capture(*node, p);
    const bool run = reached && (!captures_ || (needed_[node.get()] && dynamic_cast<AccumulateGrad*>(node.get()) == nullptr));
    std::vector<Tensor> in_grads;
    if (run) in_grads = apply(node, p.grads);
    VOLT_ASSERT(in_grads.empty() || in_grads.size() == node->next_edges.size(), node->name(),
                " returned ", in_grads.size(), " gradients for ", node->next_edges.size(), " inputs");
    pass_on(*node, in_grads, p.grads);
  }

  // autograd::grad: the gradient reaching a captured edge of `node` is kept (zeros for an output of it that
  // received none).
  void capture(const Node& node, const Pending& p) {
    for (size_t c = 0; c < captures_->edges.size(); ++c) {
      const Edge& e = captures_->edges[c];
      if (e.fn.get() != &node) continue;
      Tensor g = e.input_nr < p.grads.size() ? p.grads[e.input_nr] : Tensor();
      if (!g.defined()) {
        const InputMeta& om = node.output_meta[e.input_nr];
        g = zeros(om.shape, om.dtype, om.device);
      }
      captures_->grads[c] = g;
    }
  }

  // Runs the node's formula on its summed gradients; returns the gradients for its inputs.
  std::vector<Tensor> apply(const std::shared_ptr<Node>& node, std::vector<Tensor>& grads) {
    for (uint32_t i = 0; i < grads.size() && i < node->output_meta.size(); ++i)
      if (!grads[i].defined()) {
        // An output that received no gradient (one of several outputs unused) contributes zeros.
        const InputMeta& om = node->output_meta[i];
        grads[i] = zeros(om.shape, om.dtype, om.device);
      }
    trace_module(*node);
    if (t_pre_node_hook) (*t_pre_node_hook)(*node);
    trace::Range node_range(trace::Layer::backward, [&] { return node->name(); });
    RunningNodeScope running(node);
    std::vector<Tensor> in_grads;
    if (create_graph_ && !is_differentiable(*node)) {
      {
        NoGradGuard ng;
        in_grads = node->apply(grads);
      }
      poison_gradients(*node, in_grads, grads);
    } else {
      in_grads = node->apply(grads);
    }
    if (!retain_graph_) {
      node->release();
      node->released = true;
    }
    return in_grads;
  }

  // Tracing: consecutive nodes of one module form that module's backward range; gradient accumulation into a
  // parameter (which runs as soon as the gradient is complete) stays inside the open range.
  void trace_module(const Node& node) {
    if (!trace::active(trace::Layer::module) || node.anomaly_scope == traced_module_ ||
        dynamic_cast<const AccumulateGrad*>(&node) != nullptr)
      return;
    module_range_.reset();
    traced_module_ = node.anomaly_scope;
    if (!traced_module_.empty())
      module_range_ = std::make_unique<trace::Range>(trace::Layer::module, std::string_view(traced_module_ + ".backward"));
  }

  // Hands the node's input gradients to the nodes below it and queues each child whose parents have all run.
  void pass_on(const Node& node, std::vector<Tensor>& in_grads, const std::vector<Tensor>& incoming) {
    for (size_t i = 0; i < node.next_edges.size(); ++i) {
      const Edge& e = node.next_edges[i];
      if (!e.valid()) continue;
      if (i < in_grads.size() && in_grads[i].defined()) {
        check_input_grad(node, i, in_grads[i], incoming);
        accumulate(e, in_grads[i]);
      }
      // A child whose parents have all run becomes ready, even if no gradient reached it: it then only passes
      // the news on, so that nodes below it which other paths do reach are not left waiting.
      int& d = deps_[e.fn.get()];
      if (--d == 0) {
        ready_.push(e.fn);
        d = -1;
      }
    }
  }

  // Checks the gradient a formula returned for input i against the input's shape, casts it to the input's
  // dtype, and under detect_anomaly fails on NaN/Inf naming the node.
  static void check_input_grad(const Node& node, size_t i, Tensor& g, const std::vector<Tensor>& incoming) {
    const InputMeta& meta = node.input_meta[i];
    VOLT_ASSERT(g.shape() == meta.shape, node.name(), " produced a gradient of shape ", g.shape_str(),
                " for input ", i, " of shape ", shape_to_string(meta.shape));
    // A gradient arrives in its input's dtype (as in PyTorch's engine): a formula of a mixed-dtype op (add of
    // an f32 and a bf16 tensor under autocast) returns the wider dtype, which the producer's backward (e.g.
    // linear's bf16 GEMM) must not receive.
    if (g.dtype() != meta.dtype) g = g.to(meta.dtype);
    if (anomaly_enabled() && !finite_or_undefined(g)) {
      bool incoming_finite = true;
      for (const Tensor& in : incoming) incoming_finite = incoming_finite && finite_or_undefined(in);
      VOLT_FAIL("detect_anomaly: ", node.name(), " (the backward of ", forward_name(node.name()), " ",
                scope_phrase(node.anomaly_scope), ") produced NaN/Inf in the gradient for input ", i,
                " (input shapes: ", shapes_of(node.input_meta), "; the incoming gradient is ",
                incoming_finite ? "finite" : "already non-finite", ")");
    }
  }

  const bool retain_graph_;
  const bool create_graph_;
  Captures* captures_;
  std::unordered_map<Node*, int> deps_;
  std::vector<Node*> order_;  // reachable nodes, parents before children (DFS preorder)
  std::unordered_map<Node*, bool> needed_;
  std::unordered_map<Node*, Pending> buffers_;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready_;
  std::unique_ptr<trace::Range> module_range_;  // tracing: the module whose backward is running
  std::string traced_module_;
};

void run_engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                bool create_graph, Captures* captures) {
  VOLT_ASSERT(roots.size() == grads.size(), "run_backward: roots/grads size mismatch");
  // Without create_graph backward formulas are not themselves recorded; with it they are.
  EnableGradGuard grad_mode(create_graph);
  AutocastGuard no_autocast(false);  // backward ops run in the dtypes the forward recorded
  BackwardDepth in_backward;
  CreateGraphScope create_graph_scope(create_graph);
  GraphTask(retain_graph, create_graph, captures).run(seed_roots(roots, grads));
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  run_engine(roots, grads, retain_graph, /*create_graph=*/false, nullptr);
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              std::optional<bool> retain_graph, bool create_graph) {
  VOLT_CHECK(grad_tensors.empty() || grad_tensors.size() == tensors.size(), "autograd::backward: ",
             grad_tensors.size(), " gradients given for ", tensors.size(), " tensors");
  std::vector<Tensor> grads = grad_tensors;
  grads.resize(tensors.size());
  run_engine(tensors, grads, retain_graph.value_or(create_graph), create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& options) {
  VOLT_CHECK(!outputs.empty(), "autograd::grad: no outputs given");
  VOLT_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "autograd::grad: ",
             grad_outputs.size(), " grad_outputs given for ", outputs.size(), " outputs");
  Captures captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    VOLT_CHECK(in.defined(), "autograd::grad: input ", i, " is undefined");
    VOLT_CHECK(in.requires_grad(), "autograd::grad: input ", i, " (shape ", in.shape_str(),
               ") does not require grad; call set_requires_grad(true) on it before computing the outputs");
    captures.edges.push_back(gradient_edge(in));
  }
  captures.grads.resize(inputs.size());
  std::vector<Tensor> grads = grad_outputs;
  grads.resize(outputs.size());
  run_engine(outputs, grads, options.retain_graph.value_or(options.create_graph), options.create_graph, &captures);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (captures.grads[i].defined()) continue;
    VOLT_CHECK(options.allow_unused || options.materialize_grads, "autograd::grad: input ", i, " (shape ",
               inputs[i].shape_str(), ") is not used to compute the outputs; pass allow_unused = true to get an "
               "undefined gradient for it");
    if (options.materialize_grads) captures.grads[i] = zeros_like(inputs[i]);
  }
  return captures.grads;
}

Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output, const GradOptions& options) {
  return grad(std::vector<Tensor>{output}, std::vector<Tensor>{input}, std::vector<Tensor>{grad_output},
              options)[0];
}

}  // namespace autograd

// ---- Tensor's autograd methods ---------------------------------------------------------------------------

bool Tensor::requires_grad() const {
  return defined() && impl()->autograd && impl()->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  VOLT_CHECK(defined(), "set_requires_grad: the tensor is undefined");
  VOLT_CHECK(is_leaf() || on, "set_requires_grad(false): only leaf tensors can stop requiring grad; "
             "use detach() for a non-leaf");
  VOLT_CHECK(!on || is_floating(dtype()), "set_requires_grad: only floating-point tensors can require "
             "grad, but this tensor has dtype ", dtype_name(dtype()));
  impl()->meta().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  if (!defined() || !impl()->autograd) return Tensor();
  return impl()->autograd->grad;
}

void Tensor::set_grad(const Tensor& g) {
  VOLT_CHECK(defined(), "set_grad: the tensor is undefined");
  if (g.defined()) {
    VOLT_CHECK(g.shape() == shape(), "set_grad: gradient shape ", g.shape_str(), " does not match tensor shape ",
               shape_str());
    VOLT_CHECK(g.device() == device(), "set_grad: gradient on ", g.device().str(), " but tensor on ",
               device().str());
  }
  impl()->meta().grad = g;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  if (!defined() || !impl()->autograd) return none;
  return impl()->autograd->grad_fn;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  VOLT_CHECK(defined(), "backward: the tensor is undefined");
  autograd::run_backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  VOLT_CHECK(defined(), "detach: the tensor is undefined");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

int Tensor::register_grad_ready_hook(GradHook hook) {
  VOLT_CHECK(requires_grad() && is_leaf(), "register_grad_ready_hook: only leaf tensors that require grad "
             "(parameters) have a gradient-ready event");
  AutogradMeta& m = impl()->meta();
  int id = m.next_hook_id++;
  m.grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_grad_ready_hook(int handle) {
  if (!defined() || !impl()->autograd) return;
  auto& hooks = impl()->autograd->grad_ready_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](auto& h) { return h.first == handle; }),
              hooks.end());
}

}  // namespace volt
