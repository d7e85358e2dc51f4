#pragma once
/// @file
/// The checks nn::Module::load_state_dict makes before it copies anything, for code that loads a module's state
/// its own way (FSDP copies only each rank's slices) and must accept and refuse exactly the same dicts.
#include <string>

#include <volt/nn/module.h>

namespace volt::nn {

/// Every name of `own` (a module's state_dict()) found in `given` must have its shape and dtype; with `strict`,
/// no name may be missing from `given` and `given` may hold no other name. Throws a volt::Error
/// "<type_name>::load_state_dict: error(s) in loading the state dict:" listing the size mismatches, dtype
/// mismatches, missing keys and unexpected keys, each with the names (and expected/got shapes or dtypes).
void check_state_dict_matches(const std::string& type_name, const StateDict& own, const StateDict& given,
                              bool strict);

}  // namespace volt::nn
