#include <volt/trainer/strategies/registry.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include <volt/runtime/error.h>
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/strategies/dp.h>
#include <volt/trainer/strategies/fsdp.h>
#include <volt/trainer/strategies/zero.h>

namespace volt {
namespace {

Device root_device_of(const DeviceSelection& d) {
  return d.accelerator == "gpu" && !d.device_ids.empty() ? cuda_device(d.device_ids[0]) : kCPU;
}

std::unique_ptr<Strategy> make_single_device(const StrategyOptions& o) {
  const DeviceSelection& d = o.devices;
  VOLT_CHECK(d.num_nodes == 1, "Trainer: num_nodes=", d.num_nodes, " needs strategy=\"ddp\" (one process per ",
             "device on every node), not \"single_device\"");
  VOLT_CHECK(d.num_processes <= 1, "Trainer: strategy=\"single_device\" needs one device but devices selects ",
             d.num_processes, "; use strategy=\"ddp\" or devices=\"1\"");
  return std::make_unique<SingleDeviceStrategy>(root_device_of(d));
}

std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& o) {
  VOLT_CHECK(o.fsdp_min_num_params >= 0, "Trainer: fsdp_min_num_params=", o.fsdp_min_num_params,
             " must be >= 0 (0 turns auto-wrapping off)");
  auto s = std::make_unique<FSDPStrategy>(o.devices);
  s->set_wrap_policy({o.fsdp_min_num_params, o.fsdp_wrap});
  return s;
}

template <class DP>
std::unique_ptr<Strategy> make_replicated(const StrategyOptions& o) {
  auto s = std::make_unique<DP>(o.devices);
  s->set_replicas(o.dp_replicas, o.param_dtype);
  return s;
}

StrategyFactory zero(ZeroStage stage) {
  return [stage](const StrategyOptions& o) { return make_zero_strategy(o.devices, stage); };
}

// The built-in strategies, in the order strategy_names() lists them. A new built-in: one line here.
std::vector<std::pair<std::string, StrategyEntry>> builtin_entries() {
  const StrategyFactory ddp = [](const StrategyOptions& o) { return make_ddp_strategy(o.devices); };
  return {
      {"single_device", {make_single_device, "one process on one device"}},
      {"ddp", {ddp, "one process per device, gradients all-reduced in buckets during backward"}},
      {"ddp_spawn", {ddp, "as ddp (processes come from the launcher)"}},
      {"zero1", {zero(ZeroStage::one), "ddp with the optimizer state sharded over the ranks (ZeRO stage 1)"}},
      {"zero2", {zero(ZeroStage::two), "zero1 with the gradients sharded too (ZeRO stage 2)"}},
      {"ddp_sharded", {zero(ZeroStage::two), "alias of zero2"}},
      {"deepspeed_stage_1", {zero(ZeroStage::one), "alias of zero1"}},
      {"deepspeed_stage_2", {zero(ZeroStage::two), "alias of zero2"}},
      {"fsdp", {make_fsdp, "fully sharded: parameters, gradients and optimizer state (ZeRO stage 3)", true}},
      {"fsdp_full_shard", {make_fsdp, "alias of fsdp", true}},
      {"deepspeed_stage_3", {make_fsdp, "alias of fsdp", true}},
      {"dp", {make_replicated<DPStrategy>, "one process drives several devices, the batch split between them",
              false, true}},
      {"ddp2", {make_replicated<DDP2Strategy>, "dp inside each process, ddp across processes", false, true}},
  };
}

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::string, StrategyEntry>> entries = builtin_entries();

  StrategyEntry* find(const std::string& name) {
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
    return it == entries.end() ? nullptr : &it->second;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string quoted_names() {
  std::string names;
  for (const auto& n : strategy_names()) names += (names.empty() ? "\"" : ", \"") + n + "\"";
  return names;
}

}  // namespace

void register_strategy(const std::string& name, StrategyEntry entry) {
  VOLT_CHECK(!name.empty() && name != "auto", "register_strategy: the name must be non-empty and not \"auto\", got \"",
             name, "\"");
  VOLT_CHECK(entry.make != nullptr, "register_strategy(\"", name, "\"): the entry has no factory (make)");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (StrategyEntry* e = r.find(name)) {
    *e = std::move(entry);
  } else {
    r.entries.emplace_back(name, std::move(entry));
  }
}

bool unregister_strategy(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [n, e] : builtin_entries())
    if (n == name) {
      *r.find(name) = std::move(e);
      return true;
    }
  return std::erase_if(r.entries, [&](const auto& e) { return e.first == name; }) > 0;
}

std::vector<std::string> strategy_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names{"auto"};
  for (const auto& e : r.entries) names.push_back(e.first);
  return names;
}

std::string strategy_help(const std::string& name) {
  if (name == "auto") return "single_device for one device, ddp for several";
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const StrategyEntry* e = r.find(name);
  return e ? e->help : "";
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& options) {
  const DeviceSelection& d = options.devices;
  VOLT_CHECK(d.num_nodes >= 1, "Trainer: num_nodes=", d.num_nodes, " must be >= 1 (the number of machines)");
  std::string resolved = name;
  if (name == "auto") resolved = d.num_processes > 1 || d.num_nodes > 1 ? "ddp" : "single_device";
  StrategyEntry entry;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const StrategyEntry* e = r.find(resolved);
    if (e) entry = *e;
  }
  VOLT_CHECK(entry.make != nullptr, "Trainer: strategy=\"", name, "\" is not supported; expected one of ",
             quoted_names());
  VOLT_CHECK(entry.takes_fsdp_wrap || (options.fsdp_min_num_params == 0 && options.fsdp_wrap.empty()),
             "Trainer: fsdp_min_num_params / fsdp_wrap are options of strategy=\"fsdp\", but the strategy is \"",
             resolved, "\"");
  VOLT_CHECK(entry.takes_dp_replicas || !options.dp_replicas, "Trainer: dp_replicas is an option of strategy=\"dp\" "
             "and \"ddp2\", but the strategy is \"", resolved, "\"");
  std::unique_ptr<Strategy> s = entry.make(options);
  VOLT_CHECK(s != nullptr, "Trainer: the factory of strategy=\"", resolved, "\" returned no strategy");
  return s;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const DeviceSelection& devices) {
  StrategyOptions o;
  o.devices = devices;
  return make_strategy(name, o);
}

void register_ddp_strategy(DDPFactory factory) {
  if (!factory) {
    unregister_strategy("ddp");
    unregister_strategy("ddp_spawn");
    return;
  }
  for (const char* n : {"ddp", "ddp_spawn"})
    register_strategy(n, {[factory](const StrategyOptions& o) { return factory(o.devices); }, "injected DDP"});
}

}  // namespace volt
