// Checked public ops for the layers above the kernels: fused optimizer updates, the norm of a list of tensors
// (gradient clipping) and a one-pass scaled copy (the DDP reducer). Nothing above kernels/ calls a backend
// kernel directly; these ops check what the kernels assume and then dispatch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_set>

#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/optim_math.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/optim_extra.h>

namespace volt {

namespace {

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// In-place updates of tensors autograd tracks are only allowed with grad mode off (NoGradGuard), as for
// torch's optimizers.
void check_outside_autograd(const char* op, const Tensor& t, const char* what) {
  VOLT_CHECK(!t.requires_grad() || !autograd::grad_enabled(), op, ": ", what,
             " requires grad and grad mode is on; run the update under NoGradGuard");
}

// param/grad pair of a fused update.
void check_param_grad(const char* op, const Tensor& param, const Tensor& grad) {
  VOLT_CHECK(param.defined() && grad.defined(), op, ": param and grad must be defined");
  VOLT_CHECK(is_floating(param.dtype()), op, ": param must be floating point, got ", dtype_name(param.dtype()));
  VOLT_CHECK(param.is_contiguous(), op, ": param (shape ", param.shape_str(),
             ") is not contiguous; fused updates need contiguous parameters");
  VOLT_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype() && grad.device() == param.device(), op,
             ": grad is ", grad.shape_str(), " ", dtype_name(grad.dtype()), " on ", grad.device().str(),
             " but param is ", param.shape_str(), " ", dtype_name(param.dtype()), " on ", param.device().str());
  VOLT_CHECK(grad.is_contiguous(), op, ": grad is not contiguous");
  check_outside_autograd(op, param, "param");
}

// State tensors (undefined ones are skipped when `optional`) share one storage dtype: the param's, or f32 for
// an f16/bf16 param.
void check_state(const char* op, const Tensor& param, std::initializer_list<std::pair<const char*, const Tensor*>> state) {
  const Tensor* first = nullptr;
  for (const auto& [name, t] : state) {
    if (!t->defined()) continue;
    VOLT_CHECK(t->shape() == param.shape() && t->device() == param.device() && t->is_contiguous(), op, ": ", name,
               " is ", t->shape_str(), " on ", t->device().str(), t->is_contiguous() ? "" : " (not contiguous)",
               " but must be a contiguous tensor of the param's shape ", param.shape_str(), " on ",
               param.device().str());
    const bool ok = t->dtype() == param.dtype() || (is_half(param.dtype()) && t->dtype() == DType::f32);
    VOLT_CHECK(ok, op, ": ", name, " has dtype ", dtype_name(t->dtype()), " but a ", dtype_name(param.dtype()),
               " param keeps its state in ", dtype_name(param.dtype()),
               is_half(param.dtype()) ? " or f32" : "");
    VOLT_CHECK(!first || t->dtype() == first->dtype(), op, ": state tensors mix ", dtype_name(first->dtype()), " and ",
               dtype_name(t->dtype()));
    if (!first) first = t;
  }
}

}  // namespace

namespace {

void check_sgd(const char* op, const SgdTensors& t, const SgdHyper& h) {
  check_param_grad(op, t.param, t.grad);
  VOLT_CHECK(h.momentum == 0.0 || t.momentum_buffer.defined(), op, ": momentum=", h.momentum,
             " needs a momentum_buffer");
  check_state(op, t.param, {{"momentum_buffer", &t.momentum_buffer}});
}

void check_adam(const char* op, const AdamTensors& t, const AdamHyper& h) {
  check_param_grad(op, t.param, t.grad);
  VOLT_CHECK(t.exp_avg.defined() && t.exp_avg_sq.defined(), op, ": exp_avg and exp_avg_sq must be defined");
  VOLT_CHECK(!h.amsgrad || t.max_exp_avg_sq.defined(), op, ": amsgrad needs max_exp_avg_sq");
  check_state(op, t.param, {{"exp_avg", &t.exp_avg}, {"exp_avg_sq", &t.exp_avg_sq}, {"max_exp_avg_sq", &t.max_exp_avg_sq}});
}

// The entries of a multi-tensor update share the first one's device, param dtype and state dtype (one kernel
// instantiation runs them all), and no parameter appears twice (its update would race with itself on a GPU).
template <class Entry>
void check_list(const char* op, const std::vector<Entry>& list, const Tensor& (*state_of)(const Entry&)) {
  if (list.empty()) return;
  const Entry& first = list.front();
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const Entry& e = list[i];
    VOLT_CHECK(e.param.device() == first.param.device() && e.param.dtype() == first.param.dtype(), op, ": entry ", i,
               " is ", dtype_name(e.param.dtype()), " on ", e.param.device().str(), " but entry 0 is ",
               dtype_name(first.param.dtype()), " on ", first.param.device().str(),
               "; one multi-tensor update takes parameters of one dtype and device");
    const Tensor& st = state_of(e);
    const Tensor& st0 = state_of(first);
    VOLT_CHECK(st.defined() == st0.defined() && (!st.defined() || st.dtype() == st0.dtype()), op, ": entry ", i,
               " keeps its state in ", st.defined() ? dtype_name(st.dtype()) : "nothing", " but entry 0 in ",
               st0.defined() ? dtype_name(st0.dtype()) : "nothing");
    VOLT_CHECK(e.param.numel() == 0 || seen.insert(e.param.data_ptr()).second, op, ": entry ", i,
               " updates the same parameter memory as an earlier entry");
  }
}

const Tensor kNoTensor;  // an unused state slot (skipped by check_state)
const Tensor& adam_state(const AdamTensors& t) { return t.exp_avg; }
const Tensor& sgd_state(const SgdTensors& t) { return t.momentum_buffer; }

// The checked multi-tensor updates, eager (dynamic null: scalars from h) or captured (scalars read at run time
// from `dynamic`); `op` names the public entry point in errors.
void sgd_update(const char* op, const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic) {
  for (const SgdTensors& t : list) check_sgd(op, t, h);
  check_list(op, list, sgd_state);
  if (list.empty()) return;
  backend::call<&backend::OptimKernels::sgd_step>(list.front().param.device(), list.front().param.dtype(), list, h,
                                                  dynamic);
}

void adam_update(const char* op, const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic) {
  VOLT_CHECK(h.step >= 1, op, ": step must be >= 1 (the step being taken), got ", h.step);
  for (const AdamTensors& t : list) check_adam(op, t, h);
  check_list(op, list, adam_state);
  if (list.empty()) return;
  backend::call<&backend::OptimKernels::adam_step>(list.front().param.device(), list.front().param.dtype(), list, h,
                                                   dynamic);
}

}  // namespace

void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h) {
  sgd_step_multi_({SgdTensors{param, grad, momentum_buffer}}, h);
}

void sgd_step_multi_(const std::vector<SgdTensors>& list, const SgdHyper& h) {
  sgd_update(list.size() == 1 ? "sgd_step_" : "sgd_step_multi_", list, h, nullptr);
}

void sgd_step_multi_dynamic_(const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic) {
  VOLT_CHECK(dynamic != nullptr, "sgd_step_multi_dynamic_: the dynamic block is null");
  sgd_update("sgd_step_multi_dynamic_", list, h, dynamic);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  adam_step_multi_({AdamTensors{param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq}}, h);
}

void adam_step_multi_(const std::vector<AdamTensors>& list, const AdamHyper& h) {
  adam_update(list.size() == 1 ? "adam_step_" : "adam_step_multi_", list, h, nullptr);
}

void adam_step_multi_dynamic_(const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic) {
  VOLT_CHECK(dynamic != nullptr, "adam_step_multi_dynamic_: the dynamic block is null");
  adam_update("adam_step_multi_dynamic_", list, h, dynamic);
}

// ---- RMSprop, Adagrad, Lion (kernels/optim_extra.h) -----------------------------------------------------------

namespace {

void check_rmsprop(const char* op, const RmspropTensors& t, const RmspropHyper& h) {
  check_param_grad(op, t.param, t.grad);
  VOLT_CHECK(t.square_avg.defined(), op, ": square_avg must be defined");
  VOLT_CHECK(h.momentum == 0.0 || t.momentum_buffer.defined(), op, ": momentum=", h.momentum,
             " needs a momentum_buffer");
  VOLT_CHECK(!h.centered || t.grad_avg.defined(), op, ": centered needs grad_avg");
  check_state(op, t.param, {{"square_avg", &t.square_avg},
                            {"momentum_buffer", h.momentum != 0.0 ? &t.momentum_buffer : &kNoTensor},
                            {"grad_avg", h.centered ? &t.grad_avg : &kNoTensor}});
}

const Tensor& rmsprop_state(const RmspropTensors& t) { return t.square_avg; }
const Tensor& adagrad_state(const AdagradTensors& t) { return t.sum; }
const Tensor& lion_state(const LionTensors& t) { return t.exp_avg; }

// The checks every multi-tensor update shares: each entry (check_one), then the list (one dtype, device and
// state dtype; no parameter twice).
template <class Entry, class CheckOne>
bool check_update(const char* op, const std::vector<Entry>& list, CheckOne&& check_one,
                  const Tensor& (*state_of)(const Entry&)) {
  for (const Entry& t : list) check_one(t);
  check_list(op, list, state_of);
  return !list.empty();
}

}  // namespace

void rmsprop_step_multi_(const std::vector<RmspropTensors>& list, const RmspropHyper& h) {
  const char* op = list.size() == 1 ? "rmsprop_step_" : "rmsprop_step_multi_";
  VOLT_CHECK(h.lr >= 0 && h.eps >= 0 && h.weight_decay >= 0 && h.momentum >= 0, op,
             ": expected lr, eps, weight_decay, momentum >= 0, got ", h.lr, ", ", h.eps, ", ", h.weight_decay, ", ",
             h.momentum);
  VOLT_CHECK(h.alpha >= 0 && h.alpha <= 1, op, ": alpha must be in [0, 1], got ", h.alpha);
  if (!check_update(op, list, [&](const RmspropTensors& t) { check_rmsprop(op, t, h); }, rmsprop_state)) return;
  backend::call<&backend::OptimKernels::rmsprop_step>(list.front().param.device(), list.front().param.dtype(), list,
                                                      h);
}

void adagrad_step_multi_(const std::vector<AdagradTensors>& list, const AdagradHyper& h) {
  const char* op = list.size() == 1 ? "adagrad_step_" : "adagrad_step_multi_";
  VOLT_CHECK(h.step >= 1, op, ": step must be >= 1 (the step being taken), got ", h.step);
  VOLT_CHECK(h.lr >= 0 && h.lr_decay >= 0 && h.eps >= 0 && h.weight_decay >= 0, op,
             ": expected lr, lr_decay, eps, weight_decay >= 0, got ", h.lr, ", ", h.lr_decay, ", ", h.eps, ", ",
             h.weight_decay);
  auto one = [&](const AdagradTensors& t) {
    check_param_grad(op, t.param, t.grad);
    VOLT_CHECK(t.sum.defined(), op, ": sum must be defined");
    check_state(op, t.param, {{"sum", &t.sum}});
  };
  if (!check_update(op, list, one, adagrad_state)) return;
  backend::call<&backend::OptimKernels::adagrad_step>(list.front().param.device(), list.front().param.dtype(), list,
                                                      h);
}

void lion_step_multi_(const std::vector<LionTensors>& list, const LionHyper& h) {
  const char* op = list.size() == 1 ? "lion_step_" : "lion_step_multi_";
  VOLT_CHECK(h.lr >= 0 && h.weight_decay >= 0, op, ": expected lr, weight_decay >= 0, got ", h.lr, ", ",
             h.weight_decay);
  VOLT_CHECK(h.beta1 >= 0 && h.beta1 <= 1 && h.beta2 >= 0 && h.beta2 <= 1, op, ": betas must be in [0, 1], got (",
             h.beta1, ", ", h.beta2, ")");
  auto one = [&](const LionTensors& t) {
    check_param_grad(op, t.param, t.grad);
    VOLT_CHECK(t.exp_avg.defined(), op, ": exp_avg must be defined");
    check_state(op, t.param, {{"exp_avg", &t.exp_avg}});
  };
  if (!check_update(op, list, one, lion_state)) return;
  backend::call<&backend::OptimKernels::lion_step>(list.front().param.device(), list.front().param.dtype(), list, h);
}

void rmsprop_step_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& momentum_buffer,
                   const Tensor& grad_avg, const RmspropHyper& h) {
  rmsprop_step_multi_({RmspropTensors{param, grad, square_avg, momentum_buffer, grad_avg}}, h);
}
void adagrad_step_(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradHyper& h) {
  adagrad_step_multi_({AdagradTensors{param, grad, sum}}, h);
}
void lion_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionHyper& h) {
  lion_step_multi_({LionTensors{param, grad, exp_avg}}, h);
}

size_t optimizer_dynamic_bytes() {
  return std::max(sizeof(optim_math::DynamicAdamScalars), sizeof(optim_math::DynamicSgdScalars));
}

void write_adam_dynamic(const AdamHyper& h, void* host_bytes) {
  VOLT_CHECK(h.step >= 1, "write_adam_dynamic: step must be >= 1 (the step being taken), got ", h.step);
  optim_math::DynamicAdamScalars d{optim_math::make_adam_scalars<double>(h), optim_math::make_adam_scalars<float>(h)};
  std::memcpy(host_bytes, &d, sizeof d);
}

void write_sgd_dynamic(const SgdHyper& h, void* host_bytes) {
  optim_math::DynamicSgdScalars d{optim_math::make_sgd_scalars<double>(h), optim_math::make_sgd_scalars<float>(h)};
  std::memcpy(host_bytes, &d, sizeof d);
}

namespace {

// The tensors of a multi-tensor kernel call: the defined, non-empty ones, one list per dtype in first-seen order.
// A strided tensor (rare) is listed as a packed copy, and `written_back` gets (original, copy) so that an
// in-place kernel's result can be copied back.
std::vector<std::vector<Tensor>> lists_by_dtype(const std::vector<Tensor>& tensors,
                                                std::vector<std::pair<Tensor, Tensor>>* written_back = nullptr) {
  std::vector<std::vector<Tensor>> lists;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    Tensor c = t;
    if (!t.is_contiguous()) {
      c = t.contiguous();
      if (written_back) written_back->emplace_back(t, c);
    }
    auto it = std::find_if(lists.begin(), lists.end(), [&](const auto& l) { return l[0].dtype() == c.dtype(); });
    if (it == lists.end()) lists.push_back({c});
    else it->push_back(c);
  }
  return lists;
}

// The (single) device of the defined tensors; every defined tensor must be floating point. kCPU when none is.
Device check_floating_list(const char* op, const std::vector<Tensor>& tensors) {
  const Tensor* first = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    if (!first) first = &t;
    VOLT_CHECK(is_floating(t.dtype()), op, ": tensor ", i, " has dtype ", dtype_name(t.dtype()),
               "; expected floating point");
    VOLT_CHECK(t.device() == first->device(), op, ": tensors on different devices (", first->device().str(), " and ",
               t.device().str(), " for tensor ", i, ")");
  }
  return first ? first->device() : kCPU;
}

}  // namespace

Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double p) {
  trace::Range op_range(trace::Layer::op, "multi_tensor_norm");
  VOLT_CHECK(p > 0, "multi_tensor_norm: p must be positive (or INFINITY), got ", p);
  NoGradGuard ng;
  const Device dev = check_floating_list("multi_tensor_norm", tensors);
  // One kernel call per dtype (one launch per list on a GPU, plus one fold), accumulating into `total`.
  Tensor total = zeros({}, DType::f64, dev);
  for (const auto& list : lists_by_dtype(tensors))
    backend::call<&backend::OptimKernels::norm_partial>(dev, list[0].dtype(), list, p, total);
  if (std::isinf(p) || p == 1.0) return total;
  return p == 2.0 ? sqrt(total) : pow(total, 1.0 / p);
}

void multi_tensor_scale_(const std::vector<Tensor>& tensors, const Tensor& coef) {
  trace::Range op_range(trace::Layer::op, "multi_tensor_scale_");
  const Device dev = check_floating_list("multi_tensor_scale_", tensors);
  VOLT_CHECK(coef.defined() && coef.numel() == 1 && coef.dim() == 0 && coef.dtype() == DType::f64,
             "multi_tensor_scale_: coef must be a 0-d float64 tensor, got ",
             coef.defined() ? coef.shape_str() + " " + dtype_name(coef.dtype()) : std::string("an undefined tensor"));
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].defined()) {
      VOLT_CHECK(coef.device() == dev, "multi_tensor_scale_: coef is on ", coef.device().str(), " but the tensors on ",
                 dev.str());
      check_outside_autograd("multi_tensor_scale_", tensors[i], "a tensor");
    }
  std::vector<std::pair<Tensor, Tensor>> strided;
  for (const auto& list : lists_by_dtype(tensors, &strided))
    backend::call<&backend::OptimKernels::scale_by>(dev, list[0].dtype(), list, coef);
  for (auto& [orig, packed] : strided) orig.copy_(packed);
}

// Mixed precision: the GradScaler's fused unscale and non-finite check.
Tensor unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  trace::Range op_range(trace::Layer::op, "unscale_grads_");
  VOLT_CHECK(std::isfinite(inv_scale), "unscale_grads_: inv_scale must be finite, got ", inv_scale);
  const Tensor* first = nullptr;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    if (!first) first = &g;
    VOLT_CHECK(is_floating(g.dtype()), "unscale_grads_: gradients must be floating point, got ",
               dtype_name(g.dtype()));
    VOLT_CHECK(g.device() == first->device(), "unscale_grads_: gradients are on ", first->device().str(), " and ",
               g.device().str(), "; expected one device");
    VOLT_CHECK(!g.requires_grad(), "unscale_grads_: a gradient requires grad (unscale works in place on leaf "
               "gradients, outside autograd)");
  }
  Tensor found = zeros({}, DType::f32, first ? first->device() : kCPU);
  // One kernel call (one launch on a GPU) per gradient dtype.
  std::vector<std::pair<Tensor, Tensor>> strided;
  for (const auto& list : lists_by_dtype(grads, &strided))
    backend::call<&backend::OptimKernels::unscale_check>(list[0].device(), list[0].dtype(), list, inv_scale, found);
  for (auto& [orig, packed] : strided) orig.copy_(packed);
  return found;
}

Tensor& mul_into_(Tensor& out, const Tensor& a, double s) {
  VOLT_CHECK(out.defined() && a.defined(), "mul_into_: out and a must be defined");
  VOLT_CHECK(out.shape() == a.shape() && out.dtype() == a.dtype() && out.device() == a.device(),
             "mul_into_: out is ", out.shape_str(), " ", dtype_name(out.dtype()), " on ", out.device().str(),
             " but a is ", a.shape_str(), " ", dtype_name(a.dtype()), " on ", a.device().str());
  VOLT_CHECK(out.is_contiguous(), "mul_into_: out must be contiguous");
  VOLT_CHECK(is_floating(out.dtype()), "mul_into_: expected a floating dtype, got ", dtype_name(out.dtype()));
  check_outside_autograd("mul_into_", out, "out");
  if (out.numel() == 0) return out;
  ElemParams e;
  e.a = s;
  backend::call<&backend::ElementwiseKernels::unary>(out.device(), out.dtype(), UnaryOp::MulScalar, out, a, e);
  return out;
}

}  // namespace volt
