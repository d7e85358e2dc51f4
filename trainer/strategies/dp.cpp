#include <volt/trainer/strategies/dp.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <volt/runtime/cuda_api.h>
#include <volt/trainer/strategies/data_parallel.h>
#include <volt/trainer/strategies/module_replicas.h>
#include <volt/trainer/train_module.h>

namespace volt {

namespace detail {

// The devices one process drives, the threads of replicas 1.. and, over distinct devices, the module replicas.
class DataParallelRunner {
 public:
  DataParallelRunner(std::vector<Device> devices, bool gpus)
      : devices_(std::move(devices)), gpus_(gpus), pool_(static_cast<int>(devices_.size()) - 1) {}
  void set_replicas(bool on_cpu, DType param_dtype) {
    on_cpu_ = on_cpu;
    // The Trainer casts the root only for a non-f32 parameter dtype ("-true" precisions); so do the replicas.
    param_dtype_ = param_dtype == DType::f32 ? std::nullopt : std::optional<DType>(param_dtype);
  }
  bool wants_replicas() const { return devices_.size() > 1 && (gpus_ || on_cpu_); }
  bool uses_replicas() const { return replicas_ != nullptr; }
  void setup(TrainModule& module, const std::string& strategy) {
    replicas_.reset();
    if (!wants_replicas()) return;
    replicas_ = std::make_unique<ModuleReplicas>(module, devices_[0],
                                                 std::vector<Device>(devices_.begin() + 1, devices_.end()),
                                                 param_dtype_, strategy);
  }
  void teardown() { replicas_.reset(); }
  StepOutput run(TrainModule& module, const data::Batch& batch, const StepFn& step) {
    return run_replicas(module, batch, step, pool_, replicas_.get());
  }

 private:
  std::vector<Device> devices_;  ///< root first
  bool gpus_ = false, on_cpu_ = false;
  std::optional<DType> param_dtype_;
  ReplicaPool pool_;
  std::unique_ptr<ModuleReplicas> replicas_;
};

}  // namespace detail

namespace {

void check_automatic_optimization(const TrainModule& module, const std::string& strategy) {
  VOLT_CHECK(module.automatic_optimization, "Trainer: strategy=\"", strategy, "\" runs training_step on several ",
             "threads at once and needs automatic optimisation; ", module.type_name(), " sets automatic_optimization ",
             "= false (manual_backward inside the step): use strategy=\"ddp\" for manual optimisation");
}

// ddp2 takes its processes from the launcher and never starts workers itself: the devices are per process. On
// GPUs, DDP's root for local rank l is then cuda:l, where it binds its NCCL communicator (ProcessGroup::use_device).
DeviceSelection per_process(const DeviceSelection& devices) {
  DeviceSelection sel = devices;
  sel.num_processes = 1;
  sel.devices_auto = true;
  if (devices.accelerator == "gpu") {
    // Checked before DDP starts the process group.
    const int k = static_cast<int>(devices.device_ids.size());
    for (int j = 0; j < k; ++j)
      VOLT_CHECK(devices.device_ids[static_cast<size_t>(j)] == j, "Trainer: strategy=\"ddp2\" on GPUs takes a GPU ",
                 "count per process (devices=\"k\"; local rank l drives cuda:l, cuda:l+L, ... with L processes on ",
                 "the node), not a list of GPU ids");
    check_device_usable(cuda_device(0), "ddp2");
    sel.device_ids.clear();
    for (int i = 0; i < std::max(cuda_device_count(), 1); ++i) sel.device_ids.push_back(i);
  }
  return sel;
}

std::vector<Device> cpu_devices(int n) { return std::vector<Device>(static_cast<size_t>(std::max(n, 1)), kCPU); }

// ddp2 on GPUs: local rank l of L drives cuda:l, cuda:l+L, ... (k GPUs; cuda:l is its NCCL device).
std::vector<Device> ddp2_gpus(const DeviceSelection& sel, int local_rank, int local_world) {
  const int k = static_cast<int>(sel.device_ids.size());  // ids 0..k-1 (per_process checked them)
  const int count = cuda_device_count(), last = local_rank + (k - 1) * local_world;
  VOLT_CHECK(last < count, "Trainer: strategy=\"ddp2\" with ", local_world, " process(es) on this node x ", k,
             " GPUs each needs ", local_world * k, " GPUs (local rank ", local_rank, " would drive cuda:", last,
             "), but this node sees ", count, "; lower devices or the processes per node");
  std::vector<Device> out;
  for (int j = 0; j < k; ++j) {
    out.push_back(cuda_device(local_rank + j * local_world));
    check_device_usable(out.back(), "ddp2");
  }
  return out;
}

}  // namespace

DPStrategy::DPStrategy(const DeviceSelection& devices) {
  VOLT_CHECK(devices.num_nodes == 1, "Trainer: strategy=\"dp\" runs in one process on one machine, but num_nodes=",
             devices.num_nodes, "; use strategy=\"ddp2\" (dp inside each process, ddp across them) or \"ddp\"");
  std::vector<Device> devs;
  const bool gpus = devices.accelerator == "gpu";
  if (gpus) {
    VOLT_CHECK(!devices.device_ids.empty(), "Trainer: strategy=\"dp\": no GPU ids were selected");
    for (int id : devices.device_ids) {
      devs.push_back(cuda_device(id));
      check_device_usable(devs.back(), "dp");
    }
  } else {
    devs = cpu_devices(devices.num_processes);
  }
  root_ = devs[0];
  devices_ = static_cast<int>(devs.size());
  runner_ = std::make_unique<detail::DataParallelRunner>(std::move(devs), gpus);
}

DPStrategy::~DPStrategy() = default;

void DPStrategy::set_replicas(bool on_cpu, DType param_dtype) { runner_->set_replicas(on_cpu, param_dtype); }
bool DPStrategy::uses_replicas() const { return runner_->uses_replicas(); }

void DPStrategy::bind(TrainModule& module) {
  check_automatic_optimization(module, name());
  runner_->setup(module, name());
}

void DPStrategy::teardown(nn::Module& module) {
  runner_->teardown();
  Strategy::teardown(module);
}

StepOutput DPStrategy::run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) {
  return runner_->run(module, batch, step);
}

DDP2Strategy::DDP2Strategy(const DeviceSelection& devices)
    : DDPStrategy(per_process(devices)), devices_(devices.num_processes) {
  const bool gpus = devices.accelerator == "gpu";
  std::vector<Device> devs = gpus ? ddp2_gpus(devices, local_rank(), group().local_world_size())
                                  : cpu_devices(devices.num_processes);
  VOLT_ASSERT(devs[0] == root_device(), "ddp2: the root ", devs[0].str(), " is not DDP's device ",
              root_device().str());
  devices_ = static_cast<int>(devs.size());
  runner_ = std::make_unique<detail::DataParallelRunner>(std::move(devs), gpus);
}

DDP2Strategy::~DDP2Strategy() = default;

void DDP2Strategy::set_replicas(bool on_cpu, DType param_dtype) { runner_->set_replicas(on_cpu, param_dtype); }
bool DDP2Strategy::uses_replicas() const { return runner_->uses_replicas(); }

void DDP2Strategy::bind(TrainModule& module) {
  // setup() (DDP's) ran first: every rank's root starts from rank 0's values; the replicas copy them per step.
  check_automatic_optimization(module, name());
  runner_->setup(module, name());
}

void DDP2Strategy::teardown(nn::Module& module) {
  runner_->teardown();
  DDPStrategy::teardown(module);
}

StepOutput DDP2Strategy::run_step(TrainModule& module, const data::Batch& batch, const StepFn& step) {
  return runner_->run(module, batch, step);
}

std::unique_ptr<Strategy> make_dp_strategy(const DeviceSelection& devices) {
  return std::make_unique<DPStrategy>(devices);
}

std::unique_ptr<Strategy> make_ddp2_strategy(const DeviceSelection& devices) {
  return std::make_unique<DDP2Strategy>(devices);
}

}  // namespace volt
