// The NCCL backend (CUDA tensors). MPI bootstraps it (ncclUniqueId broadcast) and carries the debug checks
// and barriers; NCCL carries the data on the device's comm stream.
//
// Stream ordering: before a collective the comm stream waits on an event recorded on the compute stream (so
// the collective sees the finished gradients); Work::wait() makes the compute stream wait on an event recorded
// after the collective. With VOLT_NCCL_BLOCKING_WAIT=1 (the default) wait() also polls that event on the host
// with the group's timeout. VOLT_NCCL_BLOCKING_WAIT=0 keeps wait() free of host synchronisation (more overlap)
// at the price of no timeout on GPU collectives. While the compute stream is being captured into a CUDA graph,
// wait() only orders the streams (an event captured into a graph cannot be polled).
//
// A dead or stuck peer: the communicator is non-blocking (nccl_comm.h), so its creation, each enqueue, each
// blocking wait, the barrier and the teardown are watched with the group's timeout under one rule
// (nccl_watchdog.h): an error NCCL reports (ncclCommGetAsyncError) or the timeout aborts the communicator
// (ncclCommAbort, so the GPU stream does not stay stuck), marks the group broken and throws the MPI backend's
// error: the collective and its sequence number, who has exited, and, from the flight recorder, who is behind
// and in which collective.
//
// The communicator is created at the first device collective, on that tensor's device: the device a strategy
// (or a user) chose for the rank, whatever the rank numbers or CUDA_VISIBLE_DEVICES make of it.
#include <volt/config.h>
#include <volt/distributed/process_group.h>
#if VOLT_WITH_CUDA && VOLT_WITH_MPI
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <volt/distributed/nccl_comm.h>
#include <volt/distributed/peer_status.h>
#include <volt/distributed/process_group_mpi.h>
#include <volt/distributed/work_util.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/log.h>
#include <volt/runtime/cuda_check.h>
#include <volt/runtime/cuda_graph.h>

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
    case DType::i8: return ncclInt8;
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
  bool is_completed() override {
    // Inside a capture nothing has run yet; the replay orders everything after it.
    if (cuda_graph::is_capturing(dev_)) return true;
    return done->query();
  }
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
    const char* bw = std::getenv("VOLT_NCCL_BLOCKING_WAIT");
    blocking_wait_ = !(bw && std::string(bw) == "0");
    host_->set_timeout(timeout());
    set_peers(host_->peers());
  }
  ~ProcessGroupNCCL() override {
    if (!comm_) return;
    if (broken()) {
      ncclCommAbort(comm_);
    } else if (!nccl_watchdog::finalize_or_abort(comm_, timeout())) {
      logging::warn("ProcessGroup(nccl): rank " + std::to_string(rank()) + ": the NCCL communicator did not " +
                    "finish its work within the collective timeout (" + std::to_string(timeout()) +
                    " s) while being destroyed; it was aborted");
    }
    comm_ = nullptr;
  }
  std::string backend_name() const override { return "nccl"; }
  bool avg_is_fused() const override { return true; }  // ncclAvg: no separate scaling kernel

  // Creates the communicator on `device` at the first device collective, `info` (every rank reaches it,
  // collectives being called in the same order on all ranks): the one-GPU-per-rank check, the unique id over MPI,
  // then NCCL without blocking, watched with the group's timeout.
  void ensure_comm(Device device, const CollectiveInfo& info) {
    if (comm_) return;
    use_device(device);
    VOLT_CUDA_CHECK(cudaSetDevice(device_.index));
    check_one_gpu_per_rank();
    ncclUniqueId id;
    if (rank() == 0) VOLT_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Request req;
    check_mpi(MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, host_->comm(), &req), "MPI_Ibcast(ncclUniqueId)");
    host_->wait_request(req, CollectiveInfo{"nccl bootstrap (unique id broadcast)", 0});
    const CollectiveInfo init{info.op + " (creating its NCCL communicator)", info.seq};
    comm_ = nccl_watchdog::init_comm(device_.index, world_size(), id, rank(), timeout(),
                                     [&](const nccl_watchdog::Outcome& o) { return failure_text(init, o); });
  }

  // NCCL refuses two ranks on one GPU ("invalid usage" from ncclCommInitRank); say which ranks collide and
  // what to do instead, on every rank, before NCCL is asked. A GPU is told by its UUID: device numbers are per
  // process (CUDA_VISIBLE_DEVICES renumbers them), so cuda:0 in two ranks may well be two GPUs.
  void check_one_gpu_per_rank() {
    cudaDeviceProp prop{};
    VOLT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_.index));
    int64_t uuid[2];
    std::memcpy(uuid, prop.uuid.bytes, sizeof(uuid));
    std::vector<int64_t> mine = identity_record();  // (pid, host words)
    const size_t id_len = mine.size();
    mine.insert(mine.end(), {int64_t{device_.index}, uuid[0], uuid[1],
                             (int64_t{prop.pciDomainID} << 32) | (int64_t{prop.pciBusID} << 8) | prop.pciDeviceID});
    const size_t len = mine.size();
    const std::vector<int64_t> all = host_->gather_records(mine, CollectiveInfo{"nccl device check", 0});
    VOLT_ASSERT(all.size() == len * static_cast<size_t>(world_size()), "nccl device check: bad record size");
    std::vector<int64_t> ids;
    for (int r = 0; r < world_size(); ++r) ids.insert(ids.end(), all.begin() + r * len, all.begin() + r * len + id_len);
    const auto peers = decode_identities(ids, world_size());
    auto gpu = [&](int r) { return all.data() + r * len + id_len; };  // {index, uuid0, uuid1, pci}
    std::ostringstream clashes;
    for (int a = 0; a < world_size(); ++a)
      for (int b = a + 1; b < world_size(); ++b)
        if (peers[a].host == peers[b].host && gpu(a)[1] == gpu(b)[1] && gpu(a)[2] == gpu(b)[2]) {
          const int64_t pci = gpu(a)[3];
          char bus[32];
          std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x.0", static_cast<unsigned>(pci >> 32),
                        static_cast<unsigned>((pci >> 8) & 0xff), static_cast<unsigned>(pci & 0xff));
          clashes << (clashes.tellp() > 0 ? "; " : "") << "ranks " << a << " and " << b << " on host "
                  << peers[a].host << " share one GPU (PCI " << bus << ": cuda:" << gpu(a)[0] << " in rank " << a
                  << ", cuda:" << gpu(b)[0] << " in rank " << b << ")";
        }
    VOLT_CHECK(clashes.tellp() == 0, "init_process_group('nccl'): ", clashes.str(), ". NCCL needs one GPU per rank: ",
               "start at most as many ranks per host as it has GPUs (this rank sees ", cuda_device_count(),
               "), or give each rank its own GPU through CUDA_VISIBLE_DEVICES; to run several ranks without ",
               "enough GPUs use accelerator=cpu (the MPI backend)");
  }
  void local_barrier() override { host_->local_barrier(); }
  void shutdown() override { host_->abort_if_broken(broken()); }
  bool blocking_wait() const { return blocking_wait_; }
  Device device() const override { return bound_ ? device_ : device_for_local_rank(local_rank()); }
  void use_device(Device device) override {
    VOLT_CHECK(device.is_cuda(), "ProcessGroup(nccl): collectives take GPU tensors, not ", device.str());
    VOLT_CHECK(!comm_ || device == device_, "ProcessGroup(nccl): this rank's communicator is on ", device_.str(),
               "; it cannot move to ", device.str());
    check_device_usable(device, "ProcessGroup(nccl)");
    device_ = device;
    bound_ = true;
  }
  // Waits for `done` under the watchdog's rule; on an error or the timeout the communicator has been aborted,
  // and the group is marked broken and the error thrown (as the MPI backend's).
  void watch_or_fail(const CollectiveInfo& info, const std::function<bool()>& done) {
    const nccl_watchdog::Outcome o = nccl_watchdog::watch_comm(&comm_, done, timeout());
    if (o.kind != nccl_watchdog::Outcome::Kind::Done) VOLT_FAIL(failure_text(info, o));
  }
  // The error of a failed or timed-out watch of `info`; marks the group broken.
  std::string failure_text(const CollectiveInfo& info, const nccl_watchdog::Outcome& o) {
    if (o.kind == nccl_watchdog::Outcome::Kind::TimedOut) return timeout_message(info, o.elapsed_s);
    const std::string recorder = flight_recorder_report(*this, info.seq);
    std::string msg = nccl_watchdog::failure_message(info, rank(), world_size(), o.error,
                                                     peer_liveness_report() + (recorder.empty() ? "" : " " + recorder));
    mark_broken(msg);
    return msg;
  }

 protected:
  bool supports_device(Device d) const override { return d.is_cuda(); }

  // Orders the comm stream after the compute stream, runs `issue` on the comm stream, records `done`.
  template <class F>
  std::shared_ptr<Work> launch(const CollectiveInfo& info, const Tensor& t, std::vector<Tensor> keep, F issue) {
    ensure_comm(bound_ ? device_ : t.device(), info);
    VOLT_CHECK(t.device() == device_, "ProcessGroup::", info.op, ": tensor is on ", t.device().str(),
               " but this rank's NCCL communicator uses ", device_.str());
    Stream compute = get_stream(device_, StreamKind::Compute);
    Stream comm = get_stream(device_, StreamKind::Comm);
    Event ready;
    ready.record(compute);
    ready.wait(comm);
    const ncclResult_t rc = issue(raw(comm));
    if (rc == ncclInProgress) {
      // Non-blocking: NCCL finishes enqueueing in the background; the completion event must come after it.
      watch_or_fail(info, [this] { return nccl_watchdog::settled(comm_); });
    } else if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) {
      VOLT_FAIL("ProcessGroup::", info.op, " (sequence #", info.seq, "): NCCL refused the call: ", ncclGetErrorString(rc));
    } else if (rc != ncclSuccess) {  // the communicator itself failed (a peer, the network, NCCL)
      nccl_watchdog::Outcome o;
      o.kind = nccl_watchdog::Outcome::Kind::Failed;
      o.error = ncclGetErrorString(rc);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      VOLT_FAIL(failure_text(info, o));
    }
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
    // Device work first, then the host barrier (with its timeout). Before the first device collective no
    // device has been chosen, and there is no device communication to wait for.
    // Polled, not cudaStreamSynchronize: a stream behind a collective whose peer is gone would never finish.
    if (comm_) {
      Event compute_done, comm_done;
      compute_done.record(get_stream(device_, StreamKind::Compute));
      comm_done.record(get_stream(device_, StreamKind::Comm));
      watch_or_fail(info, [&] { return compute_done.query() && comm_done.query(); });
    }
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
  bool bound_ = false;  // device_ was chosen (use_device or the first collective)
  bool blocking_wait_ = true;
};

void NCCLWork::wait() {
  if (waited_) return;
  waited_ = true;
  done->wait(get_stream(dev_, StreamKind::Compute));  // later compute sees the result
  // Host polling is not allowed on an event captured into a graph (and nothing has run yet).
  if (!pg_->blocking_wait() || cuda_graph::is_capturing(dev_)) return;
  pg_->watch_or_fail(info_, [this] { return done->query(); });
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
