#pragma once
/// @file
/// How TrainModule::log records a value (trainer/train_module.h "Logging"; docs/trainer_contract.md "Logging").
#include <cstdint>
#include <optional>
#include <string>

namespace volt {

struct LogOptions {
  std::optional<bool> on_step;   ///< default: per hook (trainer/train_module.h "Logging")
  std::optional<bool> on_epoch;  ///< default: per hook
  bool prog_bar = false;
  bool logger = true;
  std::string reduce_fx = "mean";  ///< epoch reduction: "mean" (batch-size weighted), "sum", "min", "max"
  bool sync_dist = false;          ///< reduce across ranks (one collective per step for all such values)
  bool rank_zero_only = false;     ///< value only logged on rank 0; monitoring callbacks get it broadcast
  std::optional<int64_t> batch_size;  ///< default: the current batch's first dimension
};

}  // namespace volt
