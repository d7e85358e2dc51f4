#include <volt/trainer/dp_strategy.h>

#include <volt/runtime/cuda_api.h>
#include <volt/trainer/data_parallel.h>
#include <volt/trainer/train_module.h>

namespace volt {

namespace {

void check_automatic_optimization(const TrainModule& module, const std::string& strategy) {
  VOLT_CHECK(module.automatic_optimization, "Trainer: strategy=\"", strategy, "\" runs training_step on several ",
             "threads at once and needs automatic optimisation; ", module.type_name(), " sets automatic_optimization ",
             "= false (manual_backward inside the step): use strategy=\"ddp\" for manual optimisation");
}

// ddp2 takes its processes from the launcher and never starts workers itself: the devices are per process.
DeviceSelection per_process(const DeviceSelection& devices) {
  DeviceSelection sel = devices;
  sel.num_processes = 1;
  sel.devices_auto = true;
  return sel;
}

const DeviceSelection& checked_ddp2(const DeviceSelection& devices) {
  VOLT_CHECK(devices.accelerator != "gpu", "Trainer: strategy=\"ddp2\" runs its replicas on virtual CPU devices; ",
             "on GPUs use strategy=\"ddp\" (one process per GPU, the same data-parallel result)");
  return devices;
}

}  // namespace

DPStrategy::DPStrategy(const DeviceSelection& devices) {
  VOLT_CHECK(devices.num_nodes == 1, "Trainer: strategy=\"dp\" runs in one process on one machine, but num_nodes=",
             devices.num_nodes, "; use strategy=\"ddp2\" (dp inside each process, ddp across them) or \"ddp\"");
  if (devices.accelerator == "gpu") {
    VOLT_CHECK(devices.device_ids.size() == 1, "Trainer: strategy=\"dp\" with ", devices.device_ids.size(),
               " GPUs: dp shares one module between its replicas, which works on one device only; use "
               "strategy=\"ddp\" (one process per GPU) for several GPUs, or devices=1");
    root_ = cuda_device(devices.device_ids[0]);
    check_device_usable(root_, "dp");
    devices_ = 1;
  } else {
    root_ = kCPU;
    devices_ = devices.num_processes;
  }
  pool_ = std::make_unique<detail::ReplicaPool>(devices_ - 1);
}

DPStrategy::~DPStrategy() = default;

void DPStrategy::setup(TrainModule& module) {
  check_automatic_optimization(module, name());
  Strategy::setup(module);
}

StepOutput DPStrategy::run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) {
  return detail::run_replicas(module, batch, step, *pool_);
}

DDP2Strategy::DDP2Strategy(const DeviceSelection& devices)
    : DDPStrategy(per_process(checked_ddp2(devices))),
      devices_(devices.num_processes),
      pool_(std::make_unique<detail::ReplicaPool>(devices_ - 1)) {}

DDP2Strategy::~DDP2Strategy() = default;

void DDP2Strategy::setup(TrainModule& module) {
  check_automatic_optimization(module, name());
  DDPStrategy::setup(module);
}

StepOutput DDP2Strategy::run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) {
  return detail::run_replicas(module, batch, step, *pool_);
}

std::unique_ptr<Strategy> make_dp_strategy(const DeviceSelection& devices) {
  return std::make_unique<DPStrategy>(devices);
}

std::unique_ptr<Strategy> make_ddp2_strategy(const DeviceSelection& devices) {
  return std::make_unique<DDP2Strategy>(devices);
}

}  // namespace volt
