#include <volt/trainer/strategies/module_replicas.h>

#include <volt/kernels/autograd.h>
#include <volt/kernels/ops.h>

namespace volt::detail {

namespace {

// The first difference between the root's and a replica's named tensors (`what`: "parameter" / "buffer"), as
// a sentence for the error; "" when they match.
std::string first_mismatch(const nn::StateDict& root, const nn::StateDict& rep, const char* what) {
  for (size_t i = 0; i < root.size() || i < rep.size(); ++i) {
    if (i >= rep.size()) return std::string("has no ") + what + " \"" + root[i].first + "\"";
    if (i >= root.size()) return std::string("has an extra ") + what + " \"" + rep[i].first + "\"";
    const auto& [name, a] = root[i];
    const auto& [rname, b] = rep[i];
    if (name != rname)
      return std::string("has the ") + what + " \"" + rname + "\" where the root has \"" + name + "\"";
    if (a.shape() != b.shape())
      return std::string("has ") + what + " \"" + name + "\" of shape " + b.shape_str() + " where the root's is " +
             a.shape_str();
    if (a.dtype() != b.dtype())
      return std::string("has ") + what + " \"" + name + "\" of dtype " + dtype_name(b.dtype()) +
             " where the root's is " + dtype_name(a.dtype());
    if (a.storage() == b.storage())
      return std::string("shares the storage of ") + what + " \"" + name + "\" with the root (make_replica must "
             "build new tensors)";
  }
  return "";
}

}  // namespace

ModuleReplicas::ModuleReplicas(TrainModule& root, Device root_device, const std::vector<Device>& devices,
                               std::optional<DType> param_dtype, const std::string& strategy)
    : root_(root), root_device_(root_device), devices_(devices) {
  root_params_ = root.named_parameters();
  root_buffers_ = root.named_buffers();
  std::vector<std::string> root_names;
  for (auto& [name, m] : root.named_modules()) {
    root_modules_.push_back(m);
    root_names.push_back(name);
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    std::unique_ptr<TrainModule> rep = root.make_replica();
    VOLT_CHECK(rep != nullptr, "Trainer: strategy=\"", strategy, "\" needs a module replica on ", devices[i].str(),
               " but ", root.type_name(), "::make_replica() returns nullptr (the default): override it to return a "
               "new ", root.type_name(), " of the same architecture (e.g. std::make_unique<", root.type_name(),
               ">(...)), or use strategy=\"ddp\" (one process per device, no replicas)");
    VOLT_CHECK(rep.get() != &root, root.type_name(), "::make_replica() returned the module itself");
    if (param_dtype) rep->to(*param_dtype);
    std::string why = first_mismatch(root_params_, rep->named_parameters(), "parameter");
    if (why.empty()) why = first_mismatch(root_buffers_, rep->named_buffers(), "buffer");
    std::vector<nn::Module*> mods;
    for (auto& [name, m] : rep->named_modules()) {
      if (why.empty() && (mods.size() >= root_names.size() || root_names[mods.size()] != name))
        why = "has the submodule \"" + name + "\" where the root has " +
              (mods.size() < root_names.size() ? "\"" + root_names[mods.size()] + "\"" : std::string("none"));
      mods.push_back(m);
    }
    if (why.empty() && mods.size() != root_names.size())
      why = "has no submodule \"" + root_names[mods.size()] + "\"";
    VOLT_CHECK(why.empty(), "Trainer: strategy=\"", strategy, "\": the replica from ", root.type_name(),
               "::make_replica() ", why, "; make_replica must return a module of the same architecture");
    rep->to(devices[i]);
    nn::StateDict params = rep->named_parameters();
    for (auto& [name, p] : params) p.set_requires_grad(false);  // sync() makes them copies of the root's
    params_.push_back(std::move(params));
    buffers_.push_back(rep->named_buffers());
    modules_.push_back(std::move(mods));
    replicas_.push_back(std::move(rep));
  }
}

void ModuleReplicas::sync(int r) {
  VOLT_ASSERT(r >= 1 && r <= size(), "ModuleReplicas::sync: replica ", r, " of ", size());
  const size_t k = static_cast<size_t>(r - 1);
  TrainModule& rep = *replicas_[k];
  rep.trainer_ = root_.trainer_;
  rep.device_ = devices_[k];
  rep.automatic_optimization = root_.automatic_optimization;
  // Pre-order: a parent's train() reaches its children, which are visited (and corrected) after it.
  for (size_t i = 0; i < root_modules_.size(); ++i)
    if (modules_[k][i]->is_training() != root_modules_[i]->is_training())
      modules_[k][i]->train(root_modules_[i]->is_training());
  const bool grad = autograd::grad_enabled();
  const Device root_device = root_device_;
  for (size_t i = 0; i < root_params_.size(); ++i) {
    const Tensor& src = root_params_[i].second;
    Tensor& dst = params_[k][i].second;
    AutogradMeta& meta = dst.impl()->meta();  // last step's broadcast node goes
    meta.grad_fn.reset();
    meta.output_nr = 0;
    meta.requires_grad = false;
    {
      NoGradGuard no_grad;
      dst.detach().copy_(src);
    }
    // Node numbered from this replica's range (the caller's SequenceRangeScope), like the rest of its graph.
    if (grad && src.requires_grad())
      autograd::attach(dst, "ReplicaBroadcast", {src}, [root_device](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{g[0].to(root_device)};
      });
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < root_buffers_.size(); ++i) buffers_[k][i].second.detach().copy_(root_buffers_[i].second);
}

}  // namespace volt::detail
