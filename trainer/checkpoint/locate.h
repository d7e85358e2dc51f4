#pragma once
// Where Trainer checkpoints are and whether they are intact (the format itself: trainer/connectors/checkpoint_connector.cpp).
//
// A checkpoint is a stem with <stem>.safetensors and <stem>.json; the JSON is written last, so a stem whose
// JSON exists is complete, and the JSON's "safetensors_digest" ({"bytes", "crc32"}) catches a weights file
// that was torn, truncated or corrupted afterwards.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace volt {

// Throws volt::Error naming <stem>.safetensors and what mismatched when `record` (the parsed <stem>.json) has
// a digest that the file does not match. Records without a digest (written before it existed) pass.
void verify_checkpoint_weights(const std::string& stem, const nlohmann::json& record);

// <root>/checkpoints (where checkpoints go when there is no logger) and <root>/lightning_logs/version_*/checkpoints
// (under the first logger's version directory), those that exist, the latter in version order.
std::vector<std::string> default_checkpoint_dirs(const std::string& default_root_dir);

// The newest complete checkpoint in `dirs`: the stem whose JSON record was written last (by modification
// time, ties broken by global_step); "" when there is none. This is what ckpt_path="last" resumes from: after
// a crash it is the latest state that made it to disk, whichever callback wrote it ("last", "interrupted" or
// a top-k file). JSON files that are not Volt checkpoint records are ignored.
std::string newest_checkpoint(const std::vector<std::string>& dirs);

}  // namespace volt
