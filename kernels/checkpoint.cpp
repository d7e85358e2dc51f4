#include <volt/kernels/checkpoint.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_set>

#include <volt/kernels/grad.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/autocast.h>

namespace volt::autograd {

namespace {

// What the first run saw, so the second run sees the same.
struct RunState {
  AutocastState autocast;
  uint64_t seed = 0, offset = 0;  // default_generator()
  std::vector<std::pair<uint64_t, uint64_t>> explicit_gens;  // parallel to options.generators
  // Under a Graph capture of the segment's device the generators' host state says nothing about the captured
  // draws (each replay reads it anew): the capture's draw positions instead, of graph_generators (the default
  // generator as the first run saw it, then the explicit ones).
  Graph* graph = nullptr;
  std::vector<Generator*> graph_generators;
  std::vector<uint64_t> graph_positions;
};

// The generators whose draws the recomputation repeats: default_generator() (when preserved), then the explicit
// ones.
std::vector<Generator*> replayed_generators(const CheckpointOptions& o) {
  std::vector<Generator*> gens;
  if (o.preserve_rng_state) gens.push_back(&default_generator());
  gens.insert(gens.end(), o.generators.begin(), o.generators.end());
  return gens;
}

// The Graph capturing the device of the segment's tensors on this thread, or nullptr (draws on other devices are
// eager even during a capture: kernels/ops/philox_draw.h).
Graph* segment_capture(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.defined()) return Graph::capturing(t.device());
  return nullptr;
}

RunState capture_state(const CheckpointOptions& o, const std::vector<Tensor>& tensors) {
  RunState s;
  s.autocast = autocast_state();
  if ((s.graph = segment_capture(tensors)) != nullptr) {
    s.graph_generators = replayed_generators(o);
    for (Generator* g : s.graph_generators) s.graph_positions.push_back(s.graph->draw_position(*g));
    return s;
  }
  if (o.preserve_rng_state) {
    Generator& g = default_generator();
    s.seed = g.seed();
    s.offset = g.offset();
  }
  for (Generator* g : o.generators) s.explicit_gens.emplace_back(g->seed(), g->offset());
  return s;
}

// Under the capture that ran fn first: fn again with the capture's draw positions set back to the first run's (so
// each replay of the graph draws the same numbers for both runs), and forward again afterwards.
std::vector<Tensor> replay_captured(const CheckpointFn& fn, const std::vector<Tensor>& inputs, const RunState& s) {
  const std::vector<Generator*>& gens = s.graph_generators;
  std::vector<uint64_t> now;
  for (Generator* g : gens) now.push_back(s.graph->draw_position(*g));
  for (size_t i = 0; i < gens.size(); ++i) s.graph->set_draw_position(*gens[i], s.graph_positions[i]);
  struct Restore {
    std::function<void()> f;
    ~Restore() { f(); }
  } restore{[&] {
    // fn ended the capture (an error is on its way): nothing to restore.
    if (Graph::capturing(s.graph->device()) != s.graph) return;
    for (size_t i = 0; i < gens.size(); ++i)
      s.graph->set_draw_position(*gens[i], std::max(now[i], s.graph->draw_position(*gens[i])));
  }};
  return fn(inputs);
}

// Runs fn as the first run did: same autocast, default-generator draws from a copy of its saved state, the
// explicit generators set back (and restored after); under a capture, replay_captured. `tensors`: the segment's
// inputs and params, as capture_state saw them (their device says which capture counts).
std::vector<Tensor> replay(const CheckpointFn& fn, const std::vector<Tensor>& inputs, const RunState& s,
                           const CheckpointOptions& o, const std::vector<Tensor>& tensors) {
  AutocastGuard autocast(s.autocast.enabled, s.autocast.dtype);
  VOLT_CHECK(segment_capture(tensors) == s.graph, o.name, "Backward: the recomputation ",
             s.graph != nullptr ? "must run in the same Graph capture as the first run (it ran in a capture)"
                                : "runs in a Graph capture but the first run did not; capture both or neither",
             ": the random numbers of the two runs could not be made the same");
  if (s.graph != nullptr) return replay_captured(fn, inputs, s);
  std::optional<Generator> copy;
  std::optional<ThreadGeneratorScope> scope;
  if (o.preserve_rng_state) {
    copy.emplace(s.seed);
    copy->set_offset(s.offset);
    scope.emplace(&*copy);
  }
  std::vector<std::pair<uint64_t, uint64_t>> now;
  for (Generator* g : o.generators) now.emplace_back(g->seed(), g->offset());
  auto set = [&](const std::vector<std::pair<uint64_t, uint64_t>>& st) {
    for (size_t i = 0; i < o.generators.size(); ++i) {
      o.generators[i]->manual_seed(st[i].first);
      o.generators[i]->set_offset(st[i].second);
    }
  };
  set(s.explicit_gens);
  struct Restore {
    std::function<void()> f;
    ~Restore() { f(); }
  } restore{[&] { set(now); }};
  return fn(inputs);
}

// The recomputed graph may only lead to nodes it created itself or to the accumulators of the tensors whose
// gradients are wanted: any other edge is a tensor fn captured that requires grad and was not declared.
void check_no_foreign_edges(const std::vector<Tensor>& roots, const std::vector<Tensor>& wrt, uint64_t first,
                            uint64_t last, const std::string& node_name) {
  std::unordered_set<const Node*> allowed, seen;
  for (const Tensor& w : wrt) allowed.insert(gradient_edge(w).fn.get());
  std::vector<const Node*> stack;
  for (const Tensor& r : roots) stack.push_back(r.grad_fn().get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second || allowed.count(n)) continue;
    VOLT_CHECK(n->sequence_nr >= first && n->sequence_nr < last, node_name, ": the recomputed function reached ",
               n->name(), ", a node outside it: it used a tensor that requires grad but is neither one of its "
               "inputs nor listed in params (a captured weight must be passed in params and be a leaf; a captured "
               "intermediate result must be passed as an input)");
    for (const Edge& e : n->next_edges)
      if (e.valid()) stack.push_back(e.fn.get());
  }
}

void check_checkpoint_args(const CheckpointFn& fn, const std::vector<Tensor>& params, const CheckpointOptions& options) {
  VOLT_CHECK(fn != nullptr, "checkpoint: fn is empty");
  for (size_t i = 0; i < params.size(); ++i) {
    VOLT_CHECK(params[i].defined(), "checkpoint: params[", i, "] is undefined");
    VOLT_CHECK(!params[i].requires_grad() || params[i].is_leaf(), "checkpoint: params[", i, "] (shape ",
               params[i].shape_str(), ") is not a leaf; pass a tensor computed from others as an input instead");
  }
  for (size_t i = 0; i < options.generators.size(); ++i)
    VOLT_CHECK(options.generators[i] != nullptr, "checkpoint: options.generators[", i, "] is null");
}

// The backward of a checkpointed call: runs fn again with gradients recorded and differentiates the recomputed
// outputs. Holds copies, not the outputs themselves: the node must not own its own outputs (a cycle).
struct RecomputeBackward {
  CheckpointFn fn;
  RunState state;
  CheckpointOptions options;
  std::string node_name;
  size_t n_out, n_in;
  std::vector<size_t> attached_at;  // which of fn's outputs carry the node
  std::vector<InputMeta> out_meta;  // parallel to attached_at
  std::vector<Tensor> all;          // the inputs, then params

  std::vector<Tensor> operator()(const std::vector<Tensor>& grads) const {
    if (create_graph_enabled())
      // Recompute from the original inputs so the recorded graph reaches them (and their history).
      return composite_backward(all, grads, [&](const std::vector<Tensor>& a) {
        return rerun(std::vector<Tensor>(a.begin(), a.begin() + static_cast<ptrdiff_t>(n_in)));
      });
    std::vector<Tensor> detached(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      if (!all[i].defined()) continue;
      detached[i] = all[i].detach();
      if (all[i].requires_grad()) detached[i].set_requires_grad(true);
    }
    const uint64_t first = next_sequence_nr();
    std::vector<Tensor> re = rerun(detached);
    const uint64_t last = next_sequence_nr();
    std::vector<Tensor> roots, seeds, wrt;
    for (size_t j = 0; j < re.size(); ++j)
      if (re[j].requires_grad()) {
        roots.push_back(re[j]);
        seeds.push_back(grads[j].dtype() == re[j].dtype() ? grads[j] : grads[j].to(re[j].dtype()));
      }
    std::vector<size_t> slot;
    for (size_t k = 0; k < all.size(); ++k) {
      const Tensor& w = k < n_in ? detached[k] : all[k];
      if (w.defined() && w.requires_grad()) {
        wrt.push_back(w);
        slot.push_back(k);
      }
    }
    std::vector<Tensor> result(all.size());
    if (roots.empty() || wrt.empty()) return result;
    check_no_foreign_edges(roots, wrt, first, last, node_name);
    std::vector<Tensor> g = grad(roots, wrt, seeds, {.retain_graph = false, .allow_unused = true});
    for (size_t j = 0; j < slot.size(); ++j) result[slot[j]] = g[j];
    return result;
  }

  // Runs fn again over `args` (the inputs, detached or not) with gradients recorded; one tensor per attached
  // output.
  std::vector<Tensor> rerun(const std::vector<Tensor>& args) const {
    EnableGradGuard grad_on(true);
    std::vector<Tensor> re = replay(fn, args, state, options, all);
    VOLT_CHECK(re.size() == n_out, node_name, ": the recomputed function returned ", re.size(),
               " outputs, the first run ", n_out, "; fn must compute the same thing twice");
    std::vector<Tensor> picked;
    for (size_t j = 0; j < attached_at.size(); ++j) {
      const Tensor& r = re[attached_at[j]];
      const InputMeta& m = out_meta[j];
      VOLT_CHECK(r.defined() && r.shape() == m.shape && r.dtype() == m.dtype, node_name, ": recomputed output ",
                 attached_at[j], " is ", r.defined() ? r.shape_str() + " " + dtype_name(r.dtype()) : "undefined",
                 ", the first run's ", shape_to_string(m.shape), " ", dtype_name(m.dtype),
                 "; fn must compute the same thing twice");
      picked.push_back(r);
    }
    return picked;
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params, const CheckpointOptions& options) {
  const std::string node_name = options.name + "Backward";
  check_checkpoint_args(fn, params, options);
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  if (!any_requires_grad(all)) return fn(inputs);

  const RunState state = capture_state(options, all);
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  // Fresh handles (an output may be an input itself, or a view of one); the floating ones get the node.
  std::vector<Tensor> attached;
  std::vector<size_t> attached_at;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined()) continue;
    outs[k] = outs[k].detach();
    if (is_floating(outs[k].dtype())) {
      attached.push_back(outs[k]);
      attached_at.push_back(k);
    }
  }
  VOLT_CHECK(!attached.empty(), "checkpoint: fn returned no floating-point tensor to differentiate (",
             outs.size(), " outputs)");
  std::vector<InputMeta> out_meta;  // not the outputs themselves: the node must not own its own outputs (a cycle)
  for (size_t k : attached_at) out_meta.push_back({outs[k].shape(), outs[k].dtype(), outs[k].device()});
  attach_differentiable(attached, node_name, all,
                        RecomputeBackward{fn, state, options, node_name, outs.size(), inputs.size(), attached_at,
                                          out_meta, all});
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Tensor>& params, const CheckpointOptions& options) {
  VOLT_CHECK(fn != nullptr, "checkpoint: fn is empty");
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    std::vector<Tensor>{input}, params, options)[0];
}

}  // namespace volt::autograd
