#include <volt/trainer/strategies/strategy.h>

#include <volt/kernels/ops.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/optim.h>
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/fsdp.h>
#include <volt/trainer/strategies/dp.h>
#include <volt/trainer/train_module.h>
#include <volt/trainer/strategies/zero.h>

namespace volt {

void Strategy::setup(TrainModule& module) { module.to(root_device()); }

void Strategy::backward(const Tensor& loss, bool sync_grad) { loss.backward(); }

Tensor Strategy::clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return nn::clip_grad_norm_no_sync_(params, max_norm);
}

nn::StateDict Strategy::module_state_dict(TrainModule& module) { return module.state_dict(); }

void Strategy::load_module_state_dict(TrainModule& module, const nn::StateDict& sd) {
  module.load_state_dict(sd, /*strict=*/true);
}

Strategy::OptimizerState Strategy::optimizer_state(const optim::Optimizer& optimizer) {
  return {optimizer.state_dict(), optimizer.hyper_state()};
}

void Strategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& sd) {
  optimizer.load_state_dict(sd);
}

void Strategy::load_optimizer_hyper_state(optim::Optimizer& optimizer, const std::map<std::string, double>& hs) {
  optimizer.load_hyper_state(hs);
}

std::optional<double> Strategy::agreed_value(std::optional<double> local) {
  const int world = world_size();
  std::vector<double> owner{local ? static_cast<double>(global_rank()) : static_cast<double>(world)};
  reduce_values(owner, dist::ReduceOp::Min);
  const int root = static_cast<int>(owner[0]);
  if (root >= world) return std::nullopt;
  return broadcast_value(local.value_or(0.0), root);
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"auto",  "single_device", "ddp",         "ddp_spawn",
                                                 "zero1", "zero2",         "ddp_sharded", "deepspeed_stage_1",
                                                 "deepspeed_stage_2", "fsdp", "fsdp_full_shard", "deepspeed_stage_3", "dp", "ddp2"};
  return names;
}

static DDPFactory g_ddp_factory = make_ddp_strategy;
void register_ddp_strategy(DDPFactory factory) { g_ddp_factory = factory; }

std::unique_ptr<Strategy> make_strategy(const std::string& strategy, const DeviceSelection& devices) {
  Device root = devices.accelerator == "gpu" && !devices.device_ids.empty() ? cuda_device(devices.device_ids[0])
                                                                              : kCPU;
  VOLT_CHECK(devices.num_nodes >= 1, "Trainer: num_nodes=", devices.num_nodes, " must be >= 1 (the number of machines)");
  // dp and ddp2 drive several devices per process: devices counts replicas there, not processes.
  if (strategy == "dp") return make_dp_strategy(devices);
  if (strategy == "ddp2") return make_ddp2_strategy(devices);
  bool several = devices.num_processes > 1 || devices.num_nodes > 1;
  if (strategy == "single_device" || (strategy == "auto" && !several)) {
    VOLT_CHECK(devices.num_nodes == 1, "Trainer: num_nodes=", devices.num_nodes, " needs strategy=\"ddp\" (one ",
               "process per device on every node), not \"single_device\"");
    VOLT_CHECK(!several, "Trainer: strategy=\"single_device\" needs one device but devices selects ",
               devices.num_processes, "; use strategy=\"ddp\" or devices=\"1\"");
    return std::make_unique<SingleDeviceStrategy>(root);
  }
  if (strategy == "ddp" || strategy == "ddp_spawn" || strategy == "auto") {
    return g_ddp_factory ? g_ddp_factory(devices) : make_ddp_strategy(devices);
  }
  if (std::optional<ZeroStage> stage = parse_zero_strategy(strategy)) return make_zero_strategy(devices, *stage);
  if (is_fsdp_strategy(strategy)) return make_fsdp_strategy(devices);
  std::string names;
  for (const auto& n : strategy_names()) names += (names.empty() ? "\"" : ", \"") + n + "\"";
  VOLT_FAIL("Trainer: strategy=\"", strategy, "\" is not supported; expected one of ", names);
}

}  // namespace volt
