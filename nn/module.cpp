#include <volt/nn/module.h>

#include <volt/nn/state_dict_check.h>

#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace volt::nn {

namespace {

// Replaces the data behind `t`'s TensorImpl with `src`'s (a fresh, contiguous tensor), keeping autograd state,
// so every handle sharing the impl sees the new data.
void assign_data(const Tensor& t, const Tensor& src) {
  TensorImpl* impl = t.impl();
  impl->storage = src.storage();
  impl->shape = src.shape();
  impl->strides = src.strides();
  impl->offset = src.offset();
  impl->dtype = src.dtype();
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  VOLT_CHECK(!name.empty(), type_name(), "::register_", what, ": the name is empty");
  VOLT_CHECK(name.find('.') == std::string::npos, type_name(), "::register_", what, ": name '", name,
             "' contains '.', which separates nesting levels in dotted names");
  auto clash = [&](const auto& list) {
    for (const auto& e : list)
      if (e.first == name) return true;
    return false;
  };
  bool child_clash = false;
  for (const auto& c : children_) child_clash |= c.name == name;
  VOLT_CHECK(!clash(params_) && !clash(buffers_) && !child_clash, type_name(), "::register_", what, ": name '", name,
             "' is already registered as a parameter, buffer or child module");
}

Tensor& Module::register_parameter(std::string name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  VOLT_CHECK(t.defined(), type_name(), "::register_parameter: tensor '", name, "' is undefined");
  VOLT_CHECK(!requires_grad || is_floating(t.dtype()), type_name(), "::register_parameter: '", name,
             "' has dtype ", dtype_name(t.dtype()), " but a trainable parameter must be floating-point");
  // A parameter is a leaf: drop any history the initialiser recorded.
  if (!t.is_leaf()) t = t.detach();
  t.set_requires_grad(requires_grad);
  params_.emplace_back(std::move(name), std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor t) {
  check_new_name(name, "buffer");
  VOLT_CHECK(t.defined(), type_name(), "::register_buffer: tensor '", name, "' is undefined");
  buffers_.emplace_back(std::move(name), t.is_leaf() ? std::move(t) : t.detach());
  return buffers_.back().second;
}

Module::~Module() {
  // An owned child may be kept alive elsewhere (shared_ptr) and must not point at its dead parent. Children
  // registered by reference are members of the derived module and are already destroyed here.
  for (auto& c : children_)
    if (c.owned && c.owned->parent_ == this) c.owned->parent_ = nullptr;
}

void Module::add_child(std::string name, Module* child, std::shared_ptr<Module> owned) {
  check_new_name(name, "module");
  VOLT_CHECK(child != nullptr, type_name(), "::register_module: child '", name, "' is null");
  VOLT_CHECK(child != this, type_name(), "::register_module: a module cannot be its own child ('", name, "')");
  if (child->parent_ == nullptr) {
    child->parent_ = this;
    child->name_in_parent_ = name;
  }
  children_.push_back({std::move(name), child, std::move(owned)});
}

void Module::set_call_hook(CallHook* hook) {
  VOLT_CHECK(hook == nullptr || call_hook_ == nullptr || call_hook_ == hook, type_name(), " '", path_name(),
             "': set_call_hook: the module already has a call hook (one hook per module; remove it first)");
  call_hook_ = hook;
}

std::string Module::path_name() const {
  std::string path;
  for (const Module* m = this; m->parent_ != nullptr; m = m->parent_)
    path = path.empty() ? m->name_in_parent_ : m->name_in_parent_ + "." + path;
  return path;
}

// Calls f(prefix, module) for this module and its descendants, pre-order.
template <class F>
void Module::visit(const std::string& prefix, F&& f) const {
  f(prefix, *this);
  for (const auto& c : children_) c.module->visit(join(prefix, c.name), f);
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  std::unordered_set<const TensorImpl*> seen;
  auto add = [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, t] : m.params_)
      if (seen.insert(t.impl()).second) out.emplace_back(join(prefix, n), t);
  };
  if (recurse) visit("", add);
  else add("", *this);
  return out;
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  std::unordered_set<const TensorImpl*> seen;
  auto add = [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, t] : m.buffers_)
      if (seen.insert(t.impl()).second) out.emplace_back(join(prefix, n), t);
  };
  if (recurse) visit("", add);
  else add("", *this);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  visit("", [&](const std::string& prefix, const Module& m) { out.emplace_back(prefix, const_cast<Module*>(&m)); });
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.module->train(on);
}

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto& [n, t] : named_parameters()) {
    if (t.device() == device) continue;
    Tensor g = t.grad();
    assign_data(t, t.detach().contiguous().to(device));
    if (g.defined()) t.set_grad(g.to(device));
  }
  for (auto& [n, t] : named_buffers())
    if (t.device() != device) assign_data(t, t.detach().contiguous().to(device));
}

void Module::to(DType dtype) {
  VOLT_CHECK(is_floating(dtype), type_name(), "::to: dtype must be floating-point, got ", dtype_name(dtype));
  NoGradGuard ng;
  for (auto& [n, t] : named_parameters()) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) continue;
    Tensor g = t.grad();
    assign_data(t, t.detach().to(dtype).contiguous());
    if (g.defined()) t.set_grad(g.to(dtype));
  }
  for (auto& [n, t] : named_buffers())
    if (is_floating(t.dtype()) && t.dtype() != dtype) assign_data(t, t.detach().to(dtype).contiguous());
}

void Module::zero_grad(bool set_to_none) {
  // Called every step: walks the tree without building names.
  for (auto& [n, t] : params_) {
    if (!t.impl()->autograd || !t.impl()->autograd->grad.defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      NoGradGuard ng;
      t.impl()->autograd->grad.zero_();
    }
  }
  for (auto& c : children_) c.module->zero_grad(set_to_none);
}

StateDict Module::state_dict() const {
  StateDict out;
  visit("", [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, t] : m.params_) out.emplace_back(join(prefix, n), t.detach());
    for (const auto& [n, t] : m.buffers_) out.emplace_back(join(prefix, n), t.detach());
  });
  return out;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  StateDict own = state_dict();
  check_state_dict_matches(type_name(), own, sd, strict);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : sd) given.emplace(n, &t);
  NoGradGuard ng;
  for (auto& [n, dst] : own)
    if (auto it = given.find(n); it != given.end()) dst.copy_(*it->second);
}

std::string Module::repr() const {
  std::ostringstream os;
  auto rec = [&](auto&& self, const Module& m, int indent) -> void {
    os << m.type_name() << "(" << m.extra_repr();
    if (!m.children_.empty()) {
      os << "\n";
      for (const auto& c : m.children_) {
        os << std::string(indent + 2, ' ') << "(" << c.name << "): ";
        self(self, *c.module, indent + 2);
        os << "\n";
      }
      os << std::string(indent, ' ');
    }
    os << ")";
  };
  rec(rec, *this, 0);
  return os.str();
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

}  // namespace volt::nn
