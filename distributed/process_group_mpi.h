#pragma once
// The MPI backend (CPU tensors). Include only where VOLT_WITH_MPI is 1; most code wants process_group.h.
#include <volt/config.h>
#if VOLT_WITH_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // C API only: the deprecated C++ bindings warn under -Wextra
#endif
#include <mpi.h>

#include <volt/distributed/process_group.h>

namespace volt::dist {

// Initialises MPI with MPI_THREAD_FUNNELED unless it already is (then the caller owns MPI_Finalize).
void ensure_mpi_initialized();

// Throws volt::Error naming the MPI call and the MPI error string unless rc == MPI_SUCCESS.
void check_mpi(int rc, const char* call);

class ProcessGroupMPI final : public ProcessGroup {
 public:
  // Duplicates `parent` (so Volt's traffic never matches user MPI calls) and splits off the node-local
  // communicator (MPI_Comm_split_type SHARED) that gives local_rank() and local_barrier().
  explicit ProcessGroupMPI(MPI_Comm parent = MPI_COMM_WORLD);
  ~ProcessGroupMPI() override;
  std::string backend_name() const override { return "mpi"; }
  void local_barrier() override;
  void shutdown() override { abort_if_broken(broken()); }
  // MPI_Abort(MPI_COMM_WORLD) when `broken` (a group layered on this one, e.g. NCCL, passes its own state).
  void abort_if_broken(bool broken);
  MPI_Comm comm() const { return comm_; }
  MPI_Comm node_comm() const { return node_comm_; }
  // Waits for `req` with the group's timeout; throws the timeout error for `info` (group broken) otherwise.
  void wait_request(MPI_Request& req, const CollectiveInfo& info);
  // Host all-gather of one fixed-size record per rank (the debug check of other backends built on MPI).
  std::vector<int64_t> gather_records(const std::vector<int64_t>& mine, const CollectiveInfo& info) {
    return exchange_records(mine, info);
  }

 protected:
  bool supports_device(Device d) const override { return d.is_cpu(); }
  std::shared_ptr<Work> all_reduce_impl(Tensor& t, ReduceOp op, const CollectiveInfo& info) override;
  std::shared_ptr<Work> broadcast_impl(Tensor& t, int root, const CollectiveInfo& info) override;
  std::shared_ptr<Work> all_gather_impl(const Tensor& in, Tensor& out, const CollectiveInfo& info) override;
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& in, Tensor& out, ReduceOp op,
                                            const CollectiveInfo& info) override;
  std::shared_ptr<Work> barrier_impl(const CollectiveInfo& info) override;
  std::vector<int64_t> exchange_records(const std::vector<int64_t>& mine, const CollectiveInfo& info) override;

 private:
  struct Comms { MPI_Comm comm, node; int rank, size, local_rank, local_size; };
  static Comms make_comms(MPI_Comm parent);
  ProcessGroupMPI(const Comms& c);
  MPI_Comm comm_, node_comm_;
};

}  // namespace volt::dist
#endif
