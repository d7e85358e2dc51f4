#pragma once
/// @file
/// Parsing of the Trainer's `accelerator` and `devices` flags (the rules users know from the Python trainer):
/// @code
///   GPU: "3" -> first 3 GPUs; "-1" -> all; "1, 3" or "2," -> exactly those ids; "auto" -> all;
///        "0", "", "[]", duplicates, negatives other than -1, non-integers, ids that do not exist -> error.
///        The first id is the root device.
///   CPU: a positive integer (number of processes) or "auto" (= 1).
///   accelerator "auto" -> "gpu" when a GPU is usable, else "cpu"; "cuda" is an alias of "gpu".
/// @endcode
#include <string>
#include <vector>

namespace volt {

struct DeviceSelection {
  std::string accelerator;      ///< "cpu" or "gpu"
  std::vector<int> device_ids;  ///< GPU ordinals (root first); {0..n-1} placeholders for CPU processes
  int num_processes = 1;        ///< processes (one per device) the strategy will run
  bool devices_auto = false;    ///< devices was "auto": under a launcher, the processes per node come from it
  int num_nodes = 1;            ///< machines in the job (TrainerOptions::num_nodes; the parser leaves it at 1)
};

DeviceSelection parse_devices(const std::string& accelerator, const std::string& devices);
/// Same, with the number of visible GPUs given (tests, and callers that already know it).
DeviceSelection parse_devices(const std::string& accelerator, const std::string& devices, int available_gpus);
DeviceSelection parse_devices(const std::string& accelerator, const std::vector<int>& gpu_ids, int available_gpus);

/// "auto-select": the ordinals of k GPUs with no compute process running on them (queried through NVML,
/// loaded at run time). Throws volt::Error when NVML is unavailable or fewer than k GPUs are free.
std::vector<int> pick_free_gpus(int k);

}  // namespace volt
