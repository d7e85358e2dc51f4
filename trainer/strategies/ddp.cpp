#include <volt/trainer/strategies/ddp.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <volt/data/sampler.h>
#include <volt/distributed/spawn.h>
#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>
#include <volt/runtime/cuda_api.h>

namespace volt {

namespace {

// This process's command line, for re-executing it under mpirun.
std::vector<std::string> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(f, arg, '\0')) args.push_back(arg);
  return args;
}

void spawn_if_needed(int nprocs) {
  if (nprocs <= 1 || dist::detect_launch_env().source != "none") return;
  std::vector<std::string> args = own_command_line();
  VOLT_CHECK(!args.empty(), "DDP: cannot read this program's command line to start ", nprocs, " workers; "
             "launch it with `mpirun -np ", nprocs, " ...` instead");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = 0;
  if (dist::spawn_workers_if_needed(static_cast<int>(args.size()), argv.data(), nprocs, &rc)) {
    // This process was only the launcher: the workers did the training.
    std::cout.flush();
    std::exit(rc);
  }
}

}  // namespace

DDPStrategy::DDPStrategy(const DeviceSelection& devices, bool find_unused_parameters)
    : find_unused_(find_unused_parameters) {
  if (devices.num_nodes > 1) {
    // Starting workers here would put every process on this machine: a multi-node job needs a launcher.
    const int per_node = devices.devices_auto ? 1 : devices.num_processes;
    VOLT_CHECK(dist::detect_launch_env().source != "none", "DDP: num_nodes=",
               devices.num_nodes, " needs a launcher that starts the processes on every node (e.g. mpirun -np ",
               devices.num_nodes * per_node, " -H node1:", per_node, ",node2:", per_node, ",... or srun -N ",
               devices.num_nodes, " --ntasks-per-node ", per_node, "); this process was started without one");
  }
  spawn_if_needed(devices.num_processes);
  const bool gpu = devices.accelerator == "gpu";
  if (!dist::is_initialized()) {
    dist::init_process_group(gpu ? "auto" : "mpi");
    // The group outlives this Trainer (a program may run fit and then test with another Trainer); it is
    // finalised when the program exits, as MPI requires of every rank.
    std::atexit([] {
      if (dist::is_initialized()) dist::finalize_process_group();
    });
  }
  group_ = &dist::default_group();
  // Every rank computes the same layout from the world size, so a mismatch fails on all of them before any
  // collective.
  layout_ = node_layout(group_->world_size(), group_->rank(), devices.num_nodes,
                        devices.devices_auto ? 0 : devices.num_processes);
  layout_warning_ = local_rank_disagreement(layout_, group_->rank(), group_->local_rank());
  if (!layout_warning_.empty()) std::cerr << layout_warning_ << "\n";
  if (gpu) {
    VOLT_CHECK(!devices.device_ids.empty(), "DDP: no GPU ids were selected");
    const auto& ids = devices.device_ids;
    device_ = cuda_device(ids[static_cast<size_t>(group_->local_rank()) % ids.size()]);
    check_device_usable(device_, "DDP");
    if (group_->backend_name() == "nccl") group_->use_device(device_);  // the communicator goes where we train
  } else {
    device_ = kCPU;
  }
}

DDPStrategy::~DDPStrategy() = default;

void DDPStrategy::setup(nn::Module& module) {
  module.to(device_);
  std::vector<Tensor> state;
  for (auto& [name, p] : module.named_parameters()) state.push_back(p);
  for (auto& [name, b] : module.named_buffers()) state.push_back(b);
  {
    NoGradGuard ng;
    dist::broadcast_parameters(*group_, state, 0);
  }
  dist::GradReducer::Options o;
  o.find_unused_parameters = find_unused_;
  reducer_ = std::make_unique<dist::GradReducer>(*group_, module.named_parameters(), o);
}

void DDPStrategy::backward(const Tensor& loss, bool sync_grad) {
  VOLT_CHECK(reducer_ != nullptr, "DDP: backward before setup()");
  reducer_->set_sync(sync_grad);
  loss.backward();
}

void DDPStrategy::finish_gradient_sync() {
  if (reducer_ && reducer_->sync()) reducer_->finalize();
}

void DDPStrategy::teardown(nn::Module&) { reducer_.reset(); }

void DDPStrategy::process_dataloader(data::DataLoader& loader, bool training, bool shuffle, uint64_t seed) {
  const int64_t n = loader.dataset()->size();
  // Training: every rank sees an equal share (padded by repeating samples) so that steps stay in lockstep,
  // shuffled (seeded, reshuffled each epoch) when asked. Evaluation: the user's order, unpadded, so each sample
  // counts exactly once in synced metrics.
  loader.set_sampler(std::make_shared<data::DistributedSampler>(n, world_size(), global_rank(),
                                                                /*shuffle=*/training && shuffle, seed,
                                                                /*drop_last=*/false, /*pad=*/training));
}

void DDPStrategy::reduce_values(std::vector<double>& values, dist::ReduceOp op) {
  if (values.empty()) return;
  Tensor t = from_vector<double>(values).to(device_);
  group_->all_reduce(t, op);
  values = t.to_vector<double>();
}

void DDPStrategy::all_reduce_sum(Tensor& t) { group_->all_reduce(t, dist::ReduceOp::Sum); }

void DDPStrategy::barrier(const std::string&) { group_->barrier(); }

Tensor DDPStrategy::all_gather(const Tensor& t, bool sync_grads) {
  if (sync_grads) return group_->all_gather_with_grad(t.to(device_));  // to() keeps the graph
  return group_->all_gather(t.detach().to(device_));
}

std::vector<Tensor> DDPStrategy::all_gather_uneven(const Tensor& t) {
  return group_->all_gather_uneven(t.detach().to(device_));
}

double DDPStrategy::broadcast_value(double value, int src) {
  Tensor t = from_vector<double>({value}).to(device_);
  group_->broadcast(t, src);
  return t.item();
}

std::string DDPStrategy::broadcast_string(const std::string& s, int src) {
  Tensor len = from_vector<int64_t>({static_cast<int64_t>(s.size())}).to(device_);
  group_->broadcast(len, src);
  const int64_t n = len.item<int64_t>();
  std::vector<uint8_t> bytes(static_cast<size_t>(n), 0);
  if (global_rank() == src) bytes.assign(s.begin(), s.end());
  Tensor b = from_vector<uint8_t>(bytes, {n}).to(device_);
  if (n > 0) group_->broadcast(b, src);
  std::vector<uint8_t> out = b.to_vector<uint8_t>();
  return std::string(out.begin(), out.end());
}

bool DDPStrategy::reduce_decision(bool decision, bool all) {
  // One process has nothing to agree with. (Asking anyway cost a collective and a host sync per step: the
  // Trainer polls for interrupts every step at world size 1, and that sync put a one-rank DDP step on the GPU
  // 12% behind a single-device one.)
  if (world_size() == 1) return decision;
  Tensor t = from_vector<int64_t>({decision ? 1 : 0}).to(device_);
  group_->all_reduce(t, all ? dist::ReduceOp::Min : dist::ReduceOp::Max);
  return t.item() != 0;
}

void DDPStrategy::prepare_metric(metrics::Metric& metric) {
  if (metric.has_sync_fn()) return;
  dist::ProcessGroup* g = group_;
  Device dev = device_;
  metric.set_sync_fn([g, dev](std::vector<metrics::MetricState>& states) {
    metrics::sync_states_with(
        states,
        [g, dev](const Tensor& local, metrics::StateReduce op) {
          Tensor t = local.detach().to(dev).clone();
          if (op == metrics::StateReduce::Mean) {
            // Mean states average over ranks (an f64 sum divided by the world size).
            Tensor d = t.to(DType::f64);
            g->all_reduce(d, dist::ReduceOp::Sum);
            return div(d, static_cast<double>(g->world_size())).to(local.dtype()).to(local.device());
          }
          dist::ReduceOp rop = op == metrics::StateReduce::Min   ? dist::ReduceOp::Min
                               : op == metrics::StateReduce::Max ? dist::ReduceOp::Max
                                                                 : dist::ReduceOp::Sum;
          g->all_reduce(t, rop);
          return t.to(local.device());
        },
        [g, dev](const Tensor& local) {
          std::vector<Tensor> parts = g->all_gather_uneven(local.detach().to(dev));
          for (auto& p : parts) p = p.to(local.device());
          return parts;
        });
  });
}

std::unique_ptr<Strategy> make_ddp_strategy(const DeviceSelection& devices) {
  return std::make_unique<DDPStrategy>(devices);
}

}  // namespace volt
