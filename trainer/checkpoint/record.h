#pragma once
/// @file
/// Trainer checkpoints on disk: `<stem>.safetensors` (the module's state_dict plus every optimizer's tensors
/// under `"optimizer.<i>.<key>"`) and `<stem>.json` (the trainer-state record below, "format": "volt-checkpoint").
/// A sharded checkpoint (checkpoint_layout = sharded) keeps the optimizers' flat shards in one file per rank
/// under `<stem>.shards/`, described by the record's "sharded" key (trainer/checkpoint/sharded.h).
///
/// Reading is split in two so that a corrupt or hand-edited checkpoint is a volt::Error naming the file and the
/// key, never an uncaught nlohmann/std exception:
/// @code
///   parse_trainer_state   JSON -> TrainerStateRecord: every key present, of the right type and in range
///                         (standalone: no Trainer needed; fuzz targets call it directly);
///   parse_optimizer_key   "optimizer.<i>.<key>" -> i (and <key>).
/// @endcode
/// Trainer::resume_from (trainer/connectors/checkpoint_connector.cpp) then checks the record against the running Trainer (optimizer and
/// scheduler counts and types, max_epochs / max_steps, the loader's batch count).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/trainer/enums.h>

namespace volt {

struct OptimizerRecord {
  std::string type;                     ///< Optimizer::type_name()
  std::map<std::string, double> hyper;  ///< Optimizer::hyper_state(): finite numbers
};

/// The GradScaler's state ("16-mixed" runs): "grad_scaler": {"scale", "growth_tracker", "skipped"}.
struct GradScalerRecord {
  double scale = 65536.0;      ///< finite, > 0
  int64_t growth_tracker = 0;  ///< clean steps since the last change of scale, >= 0
  int64_t skipped = 0;         ///< steps skipped for inf/NaN gradients so far, >= 0
};

struct SchedulerRecord {
  std::string type;                     ///< LRScheduler::type_name()
  SchedulerInterval interval = SchedulerInterval::epoch;  ///< written as "epoch" | "step"
  int64_t frequency = 1;                ///< >= 1
  std::map<std::string, double> state;  ///< LRScheduler::state_dict()
};

struct TrainerStateRecord {
  int64_t version = 1;
  int64_t epoch = 0;          ///< the epoch the checkpoint was written in, >= 0
  int64_t global_step = 0;    ///< optimizer steps so far, >= 0
  int64_t batches_done = 0;   ///< training batches finished in `epoch`, 0 <= batches_done <= epoch_batches
  int64_t epoch_batches = 0;  ///< training batches per epoch when it was written, >= 0
  std::vector<OptimizerRecord> optimizers;
  std::vector<SchedulerRecord> schedulers;
  nlohmann::json callbacks = nlohmann::json::object();  ///< state_key -> Callback::state_dict()
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;
  nlohmann::json hparams = nlohmann::json::object();
  std::string precision;                      ///< "precision" (written since mixed precision landed; "" if absent)
  std::optional<GradScalerRecord> grad_scaler;  ///< "grad_scaler", present in 16-mixed runs
};

/// Largest epoch / global_step a record may hold (2^53: exact in a double, far beyond any real run).
constexpr int64_t kMaxCheckpointCounter = int64_t{1} << 53;

/// Validates a parsed `<stem>.json`. `source` (a file name, or "fuzz") is named in every error together with the
/// offending key, its value and what was expected. Unknown extra keys are ignored (newer writers may add some).
TrainerStateRecord parse_trainer_state(const nlohmann::json& j, const std::string& source);

/// `"optimizer.<i>.<key>"` -> i; `rest` (if given) receives `<key>`. `<i>` is a decimal index of at most 6 digits and
/// `<key>` is non-empty; anything else is a volt::Error naming `source` and the key.
size_t parse_optimizer_key(const std::string& key, const std::string& source, std::string* rest = nullptr);

}  // namespace volt
