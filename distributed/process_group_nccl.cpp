// The NCCL backend (CUDA tensors). MPI bootstraps it (ncclUniqueId broadcast) and carries the debug checks
// and barriers; NCCL carries the data on the device's comm stream.
//
// Stream ordering: before a collective the comm stream waits on an event recorded on the compute stream (so
// the collective sees the finished gradients); Work::wait() makes the compute stream wait on an event recorded
// after the collective. With VOLT_NCCL_BLOCKING_WAIT=1 (the default) wait() also polls that event on the host
// with the group's timeout and, on timeout, aborts the NCCL communicator (ncclCommAbort) so the GPU stream does
// not stay stuck, marks the group broken and throws. VOLT_NCCL_BLOCKING_WAIT=0 keeps wait() free of host
// synchronisation (more overlap) at the price of no timeout on GPU collectives.
#include <volt/config.h>
#include <volt/distributed/process_group.h>
#if VOLT_WITH_CUDA && VOLT_WITH_MPI
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <volt/distributed/process_group_mpi.h>
#include <volt/distributed/work_util.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>

#define VOLT_NCCL_CHECK(expr)                                                                         \
  do {                                                                                                \
    ncclResult_t volt_nccl_rc_ = (expr);                                                              \
    if (volt_nccl_rc_ != ncclSuccess)                                                                 \
      VOLT_FAIL("NCCL error at ", __FILE__, ":", __LINE__, ": ", #expr, " returned ",                 \
                ncclGetErrorString(volt_nccl_rc_));                                                   \
  } while (0)

namespace volt::dist {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::u8: case DType::boolean: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// Bool tensors travel as uint8: a sum would leave values above 1 in bool storage, so Sum means logical or (max).
ncclRedOp_t nccl_op_for(ReduceOp op, DType dt) {
  ncclRedOp_t o = nccl_op(op);
  return dt == DType::boolean && o == ncclSum ? ncclMax : o;
}

cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

class ProcessGroupNCCL;

class NCCLWork final : public Work {
 public:
  NCCLWork(ProcessGroupNCCL* pg, CollectiveInfo info, Device dev, std::vector<Tensor> keep)
      : pg_(pg), dev_(dev), keep_(std::move(keep)) { info_ = std::move(info); }
  ~NCCLWork() override {
    // Dropped without wait() (an error path, or a discarded async handle): the buffers in keep_ go back to the
    // allocator, whose blocks are reused in compute-stream order, so order the compute stream after NCCL.
    if (!waited_) {
      try {
        done->wait(get_stream(dev_, StreamKind::Compute));
      } catch (...) {
      }
    }
  }
  std::shared_ptr<Event> done = std::make_shared<Event>();
  bool is_completed() override { return done->query(); }
  void wait() override;

 private:
  ProcessGroupNCCL* pg_;
  Device dev_;
  std::vector<Tensor> keep_;  // alive until the comm stream is done with them
  bool waited_ = false;
};

class ProcessGroupNCCL final : public ProcessGroup {
 public:
  explicit ProcessGroupNCCL(std::unique_ptr<ProcessGroupMPI> host)
      : ProcessGroup(host->rank(), host->world_size(), host->local_rank(), host->local_world_size()),
        host_(std::move(host)) {
    VOLT_CHECK(cuda_available(), "init_process_group('nccl'): CUDA is not available on rank ", rank(), ": ",
               cuda_status());
    device_ = device_for_local_rank(local_rank());
    VOLT_CUDA_CHECK(cudaSetDevice(device_.index));
    const char* bw = std::getenv("VOLT_NCCL_BLOCKING_WAIT");
    blocking_wait_ = !(bw && std::string(bw) == "0");
    host_->set_timeout(timeout());
    set_peers(host_->peers());
    check_one_gpu_per_rank();
    ncclUniqueId id;
    if (rank() == 0) VOLT_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Request req;
    check_mpi(MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, host_->comm(), &req), "MPI_Ibcast(ncclUniqueId)");
    host_->wait_request(req, CollectiveInfo{"nccl bootstrap (unique id broadcast)", 0});
    VOLT_NCCL_CHECK(ncclCommInitRank(&comm_, world_size(), id, rank()));
  }
  ~ProcessGroupNCCL() override {
    if (!comm_) return;
    if (broken()) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  std::string backend_name() const override { return "nccl"; }
  bool avg_is_fused() const override { return true; }  // ncclAvg: no separate scaling kernel

  // NCCL refuses two ranks on one GPU ("invalid usage" from ncclCommInitRank); say which ranks collide and
  // what to do instead, on every rank, before NCCL is asked.
  void check_one_gpu_per_rank() {
    std::vector<int64_t> mine = identity_record();
    mine[0] = device_.index;  // (device, host) instead of (pid, host)
    const auto all = decode_identities(host_->gather_records(mine, CollectiveInfo{"nccl device check", 0}),
                                       world_size());
    std::ostringstream clashes;
    for (int a = 0; a < world_size(); ++a)
      for (int b = a + 1; b < world_size(); ++b)
        if (all[a].host == all[b].host && all[a].pid == all[b].pid)
          clashes << (clashes.tellp() > 0 ? "; " : "") << "ranks " << a << " and " << b << " on host "
                  << all[a].host << " both use cuda:" << all[a].pid;
    VOLT_CHECK(clashes.tellp() == 0, "init_process_group('nccl'): ", clashes.str(), ". NCCL needs one GPU per rank: ",
               "start at most as many ranks per host as it has GPUs (this host sees ", cuda_device_count(),
               "), or give each rank its own GPU through CUDA_VISIBLE_DEVICES; to run several ranks without ",
               "enough GPUs use accelerator=cpu (the MPI backend)");
  }
  void local_barrier() override { host_->local_barrier(); }
  void shutdown() override { host_->abort_if_broken(broken()); }
  bool blocking_wait() const { return blocking_wait_; }
  Device device() const { return device_; }

  // Called by NCCLWork on a timeout: unblocks the stream and poisons the group.
  [[noreturn]] void fail_timeout(const CollectiveInfo& info, double elapsed) {
    std::string msg = timeout_message(info, elapsed);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    VOLT_FAIL(msg);
  }

 protected:
  bool supports_device(Device d) const override { return d.is_cuda(); }

  // Orders the comm stream after the compute stream, runs `issue` on the comm stream, records `done`.
  template <class F>
  std::shared_ptr<Work> launch(const CollectiveInfo& info, const Tensor& t, std::vector<Tensor> keep, F issue) {
    VOLT_CHECK(t.device() == device_, "ProcessGroup::", info.op, ": tensor is on ", t.device().str(),
               " but this rank's NCCL communicator uses ", device_.str());
    Stream compute = get_stream(device_, StreamKind::Compute);
    Stream comm = get_stream(device_, StreamKind::Comm);
    Event ready;
    ready.record(compute);
    ready.wait(comm);
    VOLT_NCCL_CHECK(issue(raw(comm)));
    auto w = std::make_shared<NCCLWork>(this, info, device_, std::move(keep));
    w->done->record(comm);
    return w;
  }

  std::shared_ptr<Work> all_reduce_impl(Tensor& t, ReduceOp op, const CollectiveInfo& info) override {
    return launch(info, t, {t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nccl_op_for(op, t.dtype()), comm_, s);
    });
  }
  std::shared_ptr<Work> broadcast_impl(Tensor& t, int root, const CollectiveInfo& info) override {
    return launch(info, t, {t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), root, comm_, s);
    });
  }
  std::shared_ptr<Work> all_gather_impl(const Tensor& in, Tensor& out, const CollectiveInfo& info) override {
    return launch(info, in, {in, out}, [&](cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.dtype()), comm_, s);
    });
  }
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& in, Tensor& out, ReduceOp op,
                                            const CollectiveInfo& info) override {
    return launch(info, in, {in, out}, [&](cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.dtype()), nccl_op_for(op, in.dtype()),
                               comm_, s);
    });
  }
  std::shared_ptr<Work> barrier_impl(const CollectiveInfo& info) override {
    // Device work first, then the host barrier (with its timeout).
    synchronize(get_stream(device_, StreamKind::Compute));
    synchronize(get_stream(device_, StreamKind::Comm));
    host_->barrier();
    return std::make_shared<DoneWork>(info);
  }
  std::vector<int64_t> exchange_records(const std::vector<int64_t>& mine, const CollectiveInfo& info) override {
    host_->set_timeout(timeout());
    return host_->gather_records(mine, info);
  }

 private:
  std::unique_ptr<ProcessGroupMPI> host_;
  ncclComm_t comm_ = nullptr;
  Device device_;
  bool blocking_wait_ = true;
};

void NCCLWork::wait() {
  if (waited_) return;
  waited_ = true;
  done->wait(get_stream(dev_, StreamKind::Compute));  // later compute sees the result
  if (!pg_->blocking_wait()) return;
  auto start = std::chrono::steady_clock::now();
  if (!poll_until([&] { return done->query(); }, pg_->timeout())) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    pg_->fail_timeout(info_, s);
  }
}

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group() {
  return std::make_unique<ProcessGroupNCCL>(std::make_unique<ProcessGroupMPI>());
}

}  // namespace volt::dist

#else
namespace volt::dist {
std::unique_ptr<ProcessGroup> make_nccl_group() {
  VOLT_FAIL("init_process_group: backend 'nccl' is unavailable: Volt was built without ",
            VOLT_WITH_CUDA ? "MPI (needed to bootstrap NCCL)" : "CUDA");
}
}  // namespace volt::dist
#endif
