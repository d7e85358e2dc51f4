// scaled_dot_product_attention through cuDNN's fused SDPA (flash attention), forward and backward, built on the
// cuDNN frontend's graph API (header-only; scripts/setup.sh fetches it, cmake/modules/FindVoltCudnnFrontend.cmake
// finds it). Compiled to nothing when the build did not find the headers (VOLT_CUDNN_SDPA 0): the CUDA attention
// table (attention.cu) then has no flash kernels and the op runs Volt's own fused softmax.
//
// A graph (operation graph, execution plan, workspace size) is built once per configuration and kept for the
// process, as llm.c's cudnn_att.cpp does: the key is the device, dtype, direction, the layouts of q, k, v and out
// and of the backward's dO, dQ, dK, dV (dims and strides), the scale and the mask. A configuration cuDNN refuses
// is remembered too, with its reason, so the op falls back at once the next time. Workspaces come from Volt's
// caching allocator (stream-ordered on the compute stream, like the cuDNN convolutions). Contracts:
// kernels/backend/attention.h.
#include <volt/kernels/backend/attention.h>

#if VOLT_CUDNN_SDPA
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <volt/kernels/cuda/cudnn_util.cuh>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_graph.h>

namespace volt::cuda {

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null when refused
  int64_t workspace = 0;
  std::string refusal;
};

std::vector<int64_t> dims_of(const FlashAttnTensor& t) { return {t.dim[0], t.dim[1], t.dim[2], t.dim[3]}; }
std::vector<int64_t> strides_of(const FlashAttnTensor& t) {
  return {t.stride[0], t.stride[1], t.stride[2], t.stride[3]};
}
std::vector<int64_t> stats_dims(const FlashAttnParams& p) { return {p.q.dim[0], p.q.dim[1], p.q.dim[2], 1}; }
std::vector<int64_t> stats_strides(const FlashAttnParams& p) { return {p.q.dim[1] * p.q.dim[2], p.q.dim[2], 1, 1}; }

// An input tensor `uid` of the graph, laid out as `layout`.
std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                   const FlashAttnTensor& layout) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims_of(layout)).set_stride(
      strides_of(layout)));
}

// Marks t as the graph's output `uid`, laid out as `layout`.
void output(fe::graph::Tensor_attributes& t, Uid uid, const FlashAttnTensor& layout) {
  t.set_output(true).set_uid(uid).set_dim(dims_of(layout)).set_stride(strides_of(layout));
}

// Causal masking, top-left aligned: query i keeps keys j <= i (forward and backward attributes alike).
template <class Attributes>
void set_causal(Attributes& opts, bool causal) {
  if (causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dt) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dt == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> forward_graph(DType dt, const FlashAttnParams& p) {
  auto g = new_graph(dt);
  auto q = input(*g, "Q", kQ, p.q), k = input(*g, "K", kK, p.k), v = input(*g, "V", kV, p.v);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("volt_sdpa")
                  .set_generate_stats(p.training)
                  .set_attn_scale(static_cast<float>(p.scale));
  set_causal(opts, p.causal);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  output(*o, kO, p.o);
  if (p.training)
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims(p))
        .set_stride(stats_strides(p));
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(DType dt, const FlashAttnParams& p) {
  auto g = new_graph(dt);
  auto q = input(*g, "Q", kQ, p.q), k = input(*g, "K", kK, p.k), v = input(*g, "V", kV, p.v);
  auto o = input(*g, "O", kO, p.o);
  const FlashAttnGradLayouts gl = flash_attention_grad_layouts(p);
  auto dout = input(*g, "dO", kDO, gl.d_o);
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim(stats_dims(p))
                             .set_stride(stats_strides(p))
                             .set_data_type(fe::DataType_t::FLOAT));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("volt_sdpa_backward")
                  .set_attn_scale(static_cast<float>(p.scale));
  set_causal(opts, p.causal);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
  output(*dq, kDQ, gl.dq);
  output(*dk, kDK, gl.dk);
  output(*dv, kDV, gl.dv);
  return g;
}

// Validates, lowers and plans `g` with the heuristics' first choice; the refusal is cuDNN's message.
Plan build(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h) {
  Plan plan;
  auto ok = [&](fe::error_t e) {
    if (!e.is_good()) plan.refusal = "cuDNN: " + e.get_message();
    return e.is_good();
  };
  try {
    if (ok(g->validate()) && ok(g->build_operation_graph(h)) && ok(g->create_execution_plans({fe::HeurMode_t::A})) &&
        ok(g->check_support(h)) && ok(g->build_plans(h)) && ok(g->get_workspace_size(plan.workspace)))
      plan.graph = std::move(g);
  } catch (const std::exception& e) {  // the frontend throws on some malformed graphs
    plan.refusal = std::string("cuDNN frontend: ") + e.what();
  }
  if (plan.refusal.empty() && !plan.graph) plan.refusal = "cuDNN: no plan";
  return plan;
}

using Key = std::vector<int64_t>;

Key key_of(const Device& dev, DType dt, const FlashAttnParams& p, bool backward) {
  int64_t scale_bits = 0;
  const float scale = static_cast<float>(p.scale);  // what the graph holds
  std::memcpy(&scale_bits, &scale, sizeof scale);
  Key k{dev.index, static_cast<int64_t>(dt), backward, p.causal, p.training, scale_bits};
  const FlashAttnGradLayouts gl = flash_attention_grad_layouts(p);  // the backward graph's; the forward's too, since
                                                                      // a training forward plans the backward
  for (const FlashAttnTensor* t : {&p.q, &p.k, &p.v, &p.o, &gl.d_o, &gl.dq, &gl.dk, &gl.dv})
    for (int i = 0; i < 4; ++i) k.insert(k.end(), {t->dim[i], t->stride[i]});
  return k;
}

std::mutex g_mu;
std::map<Key, std::shared_ptr<const Plan>> g_plans;

// The cached plan for (dev, dt, p, backward), built on first use: not during a CUDA graph capture of dev (building
// may touch the device outside the captured stream), where a missing plan is a refusal that is not remembered.
std::shared_ptr<const Plan> plan_for(const Device& dev, DType dt, const FlashAttnParams& p, bool backward,
                                     cudnnHandle_t h) {
  const Key key = key_of(dev, dt, p, backward);
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  if (cuda_graph::is_capturing(dev)) {
    auto refused = std::make_shared<Plan>();
    refused->refusal = "first use of this shape during a CUDA graph capture (run the step once before capturing)";
    return refused;
  }
  auto plan = std::make_shared<const Plan>(build(backward ? backward_graph(dt, p) : forward_graph(dt, p), h));
  g_plans.emplace(key, plan);
  return plan;
}

Tensor workspace(const Device& device, int64_t bytes) {
  return empty({std::max<int64_t>(bytes, 1)}, DType::u8, device);
}

void execute(const Plan& plan, cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, const Device& dev,
             const char* what) {
  Tensor ws = workspace(dev, plan.workspace);
  fe::error_t e = plan.graph->execute(h, pack, ws.data_ptr());
  VOLT_CHECK(e.is_good(), "scaled_dot_product_attention: cuDNN's SDPA ", what, " failed on ", dev.str(), ": ",
             e.get_message());
}

}  // namespace

void flash_attn_fwd(const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
                    const FlashAttnParams& p, FlashAttnStatus* status) {
  const Device dev = q.device();
  status->refusal = flash_attention_cudnn_version_refusal(static_cast<int64_t>(cudnnGetVersion()));
  if (!status->refusal.empty()) return;
  if (cuda_graph::is_capturing(dev)) {  // the handle must exist already (cudnn_util.cuh)
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_plans.find(key_of(dev, q.dtype(), p, false)) == g_plans.end()) {
      status->refusal = "first use of this shape during a CUDA graph capture (run the step once before capturing)";
      return;
    }
  }
  cudnnHandle_t h = cudnn::handle_for(dev);
  auto fwd = plan_for(dev, q.dtype(), p, false, h);
  if (!fwd->graph) {
    status->refusal = "forward: " + fwd->refusal;
    return;
  }
  if (p.training) {
    auto bwd = plan_for(dev, q.dtype(), p, true, h);
    if (!bwd->graph) {
      status->refusal = "backward: " + bwd->refusal;
      return;
    }
  }
  std::unordered_map<int64_t, void*> pack{
      {kQ, q.data_ptr()}, {kK, k.data_ptr()}, {kV, v.data_ptr()}, {kO, out.data_ptr()}};
  if (p.training) pack[kStats] = stats.data_ptr();
  execute(*fwd, h, pack, dev, "forward");
}

void flash_attn_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& dout, const Tensor& stats,
                    const FlashAttnParams& p) {
  const Device dev = q.device();
  cudnnHandle_t h = cudnn::handle_for(dev);
  auto bwd = plan_for(dev, q.dtype(), p, true, h);
  VOLT_CHECK(bwd->graph != nullptr, "scaled_dot_product_attention: cuDNN refused the SDPA backward it accepted in "
             "the forward (", bwd->refusal, ")");
  std::unordered_map<int64_t, void*> pack{{kQ, q.data_ptr()},        {kK, k.data_ptr()},     {kV, v.data_ptr()},
                                          {kO, out.data_ptr()},      {kDO, dout.data_ptr()}, {kStats, stats.data_ptr()},
                                          {kDQ, dq.data_ptr()},      {kDK, dk.data_ptr()},   {kDV, dv.data_ptr()}};
  execute(*bwd, h, pack, dev, "backward");
}

}  // namespace volt::cuda
#endif  // VOLT_CUDNN_SDPA
