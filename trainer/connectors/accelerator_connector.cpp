// Trainer::setup_strategy: from TrainerOptions' accelerator, devices, num_nodes and strategy to a Strategy built
// by the registry (trainer/strategies/registry.h), with the options only some strategies take handed to its
// factory. The Trainer itself never names a concrete strategy.
#include <cstdio>
#include <iostream>
#include <string>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/log.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/registry.h>
#include <volt/trainer/trainer.h>

namespace volt {

void Trainer::setup_strategy() {
  DeviceSelection sel = parse_devices(opt_.accelerator, opt_.devices);
  if (opt_.auto_select_gpus && sel.accelerator == "gpu") {
    // devices="k": k GPUs that no other process is computing on, instead of the first k.
    int k = 0;
    VOLT_CHECK(std::sscanf(opt_.devices.c_str(), "%d", &k) == 1 && k > 0 && opt_.devices.find(',') == std::string::npos,
               "Trainer: auto_select_gpus needs devices to be a GPU count (e.g. \"2\"), got \"", opt_.devices, "\"");
    sel = parse_devices("gpu", pick_free_gpus(k), cuda_device_count());
  }
  sel.num_nodes = opt_.num_nodes;  // checked by make_strategy
  StrategyOptions so;
  so.devices = sel;
  so.param_dtype = precision_param_dtype(precision_);
  so.fsdp_min_num_params = opt_.fsdp_min_num_params;
  so.fsdp_wrap = opt_.fsdp_wrap;
  so.dp_replicas = opt_.dp_replicas;
  strategy_ = make_strategy(opt_.strategy, so);  // strategy-specific options go through the registry
  apply_benchmark_option();
  if (strategy_->is_global_zero()) {
    // Which accelerator there is and which is used, as upstream's console says at start-up.
    const int gpus = cuda_available() ? cuda_device_count() : 0;
    const bool used = strategy_->root_device().is_cuda();
    std::cout << "GPU available: " << (gpus > 0 ? "True (cuda)" : "False") << ", used: " << (used ? "True" : "False")
              << "\n";
    if (gpus > 0 && !used)
      logging::warn("Trainer: a GPU is available but not used; pass accelerator=\"gpu\" (--accelerator gpu) to use "
                    "it");
  }
}

}  // namespace volt
