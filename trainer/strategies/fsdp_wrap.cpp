#include <volt/trainer/strategies/fsdp_wrap.h>

#include <map>
#include <set>

namespace volt {

std::vector<FsdpUnitPlan> plan_fsdp_units(nn::Module& root, const FsdpWrapPolicy& policy) {
  VOLT_CHECK(policy.min_num_params >= 0, "FSDP: fsdp_min_num_params=", policy.min_num_params,
             " must be >= 0 (0 turns auto-wrapping off)");
  std::vector<std::pair<std::string, nn::Module*>> modules = root.named_modules();
  std::set<std::string> names;
  for (auto& [name, m] : modules) names.insert(name);
  for (const auto& w : policy.modules) {
    VOLT_CHECK(!w.empty(), "FSDP: fsdp_wrap holds an empty name; the root module is always a unit (its leftover "
               "parameters), list submodules only");
    if (names.count(w)) continue;
    std::string known;
    int shown = 0;
    for (auto& [name, m] : modules) {
      if (name.empty()) continue;
      if (shown++ == 20) {
        known += ", ...";
        break;
      }
      known += (known.empty() ? "'" : ", '") + name + "'";
    }
    VOLT_FAIL("FSDP: fsdp_wrap names module '", w, "' but ", root.type_name(), " has no such submodule; its modules are ",
              known.empty() ? std::string("none") : known);
  }
  const std::set<std::string> wrap(policy.modules.begin(), policy.modules.end());
  std::map<const TensorImpl*, std::string> canonical;  // a shared parameter is named as the root names it
  for (auto& [name, p] : root.named_parameters()) canonical.emplace(p.impl(), name);
  std::set<const TensorImpl*> claimed;
  std::vector<FsdpUnitPlan> units;
  auto take = [&](nn::Module& m, bool commit, FsdpUnitPlan& unit) {
    for (auto& [rel, p] : m.named_parameters()) {
      if (!p.requires_grad() || claimed.count(p.impl())) continue;
      if (commit) claimed.insert(p.impl());
      unit.params.push_back(canonical.at(p.impl()));
      unit.numel += p.numel();
    }
  };
  // Reverse pre-order visits every module after its descendants.
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    auto& [name, m] = *it;
    if (name.empty()) continue;
    FsdpUnitPlan unit{name, m, {}, 0};
    take(*m, /*commit=*/false, unit);
    const bool by_size = policy.min_num_params > 0 && unit.numel >= policy.min_num_params;
    if (unit.params.empty() || !(wrap.count(name) || by_size)) continue;
    unit = FsdpUnitPlan{name, m, {}, 0};
    take(*m, /*commit=*/true, unit);
    units.push_back(std::move(unit));
  }
  FsdpUnitPlan rest{"", &root, {}, 0};
  take(root, /*commit=*/true, rest);
  units.push_back(std::move(rest));
  return units;
}

}  // namespace volt
