#pragma once
/// @file
/// The strategy registry: the names TrainerOptions::strategy accepts and the factory behind each. The built-in
/// strategies are registered here (registry.cpp); a research project adds its own from its code, before it
/// builds the Trainer, with one call:
/// @code
///   volt::register_strategy("my_ddp", {.make = [](const volt::StrategyOptions& o) {
///                                          return std::make_unique<MyDDP>(o.devices); },
///                                      .help = "DDP with my gradient compression"});
///   volt::Trainer trainer({.strategy = "my_ddp", .devices = "2"});
/// @endcode
/// The Trainer, TrainerOptions and the example flags need no edit: `--strategy my_ddp` is accepted because the
/// flag parser asks strategy_names(). Adding a built-in strategy is one file in trainer/strategies/ and one
/// line in builtin_entries() (registry.cpp).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <volt/runtime/dtype.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/strategy.h>

namespace volt {

/// What a factory is given: the parsed device selection and the options some strategies take. An option a
/// strategy does not take (StrategyEntry::takes_*) must be left at its default, or make_strategy says so.
struct StrategyOptions {
  DeviceSelection devices;             ///< accelerator, device ids, processes, num_nodes
  DType param_dtype = DType::f32;      ///< the precision's parameter dtype (dp builds its replicas in it)
  int64_t fsdp_min_num_params = 0;     ///< fsdp: auto-wrap threshold (trainer/strategies/fsdp_wrap.h)
  std::vector<std::string> fsdp_wrap;  ///< fsdp: submodules wrapped as units
  bool dp_replicas = false;            ///< dp/ddp2: replicas on virtual CPU devices (TrainerOptions::dp_replicas)
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(const StrategyOptions&)>;

struct StrategyEntry {
  StrategyFactory make;
  std::string help;                ///< one line: what the strategy does
  bool takes_fsdp_wrap = false;    ///< reads fsdp_min_num_params / fsdp_wrap
  bool takes_dp_replicas = false;  ///< reads dp_replicas
};

/// Adds `name` (or replaces the entry of that name, built-ins included). "auto" is not a registered name: it
/// picks "single_device" for one device and "ddp" for several. An empty name or a missing factory is an error.
void register_strategy(const std::string& name, StrategyEntry entry);
/// Removes a name a program registered; a built-in name returns to its built-in factory. True if it existed.
bool unregister_strategy(const std::string& name);
/// "auto" and every registered name: the built-ins in their documented order, then the program's own.
std::vector<std::string> strategy_names();
/// The entry's one-line description ("" for an unknown name).
std::string strategy_help(const std::string& name);

/// Builds the strategy `name` asks for. Built-in names: "auto", "single_device", "ddp", "ddp_spawn", "zero1",
/// "zero2" (aliases "deepspeed_stage_1", "deepspeed_stage_2", "ddp_sharded" = zero2), "fsdp" (aliases
/// "fsdp_full_shard", "deepspeed_stage_3"; trainer/strategies/fsdp.h), "dp" and "ddp2" (in-process replicas,
/// trainer/strategies/dp.h). Errors (volt::Error): an unknown name (the message lists strategy_names()),
/// num_nodes < 1, several devices or nodes for single_device, and an option the strategy does not take.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& options);
/// The same with every option at its default.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const DeviceSelection& devices);

/// Older hook for tests that inject a fake multi-rank DDP: replaces the "ddp" factory ("ddp_spawn" and "auto"
/// with several devices follow it); nullptr restores the built-in. Prefer register_strategy.
using DDPFactory = std::unique_ptr<Strategy> (*)(const DeviceSelection& devices);
void register_ddp_strategy(DDPFactory factory);

}  // namespace volt
