#pragma once
/// @file
/// Which modules become FSDP units (trainer/strategies/fsdp.h): the wrap policy and the plan it gives a model.
#include <cstdint>
#include <string>
#include <vector>

#include <volt/nn/module.h>

namespace volt {

/// How a model is cut into FSDP units (TrainerOptions::fsdp_min_num_params / fsdp_wrap).
struct FsdpWrapPolicy {
  /// Auto-wrap by size (upstream's size_based_auto_wrap_policy): a submodule whose parameters not yet in a unit
  /// (counted recursively, trainable ones only) number at least this many becomes a unit, children before their
  /// parents. 0: no auto-wrapping.
  int64_t min_num_params = 0;
  /// Dotted module names ("encoder", "decoder.l1") that become units (their parameters not already claimed by
  /// a unit below them). A name that matches no submodule is a volt::Error.
  std::vector<std::string> modules;
};

/// One unit of the plan: a module and the dotted names (as the root's named_parameters gives them) of the
/// trainable parameters it shards.
struct FsdpUnitPlan {
  std::string name;             ///< the module's dotted name; "" for the root unit
  nn::Module* module = nullptr;  ///< the root module for the root unit
  std::vector<std::string> params;
  int64_t numel = 0;
};

/// The units of `root` under `policy`: wrapped submodules children first (a module is visited after all of its
/// descendants), then the root unit, always last, holding every trainable parameter left over (possibly none).
/// Parameters with requires_grad false belong to no unit (they stay replicated). A parameter shared by two
/// modules belongs to the first unit that claims it.
std::vector<FsdpUnitPlan> plan_fsdp_units(nn::Module& root, const FsdpWrapPolicy& policy);

}  // namespace volt
