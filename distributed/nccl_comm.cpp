#include <volt/config.h>
#if VOLT_WITH_CUDA
#include <volt/distributed/nccl_comm.h>

#include <cuda_runtime_api.h>

#include <volt/runtime/cuda_check.h>
#include <volt/runtime/error.h>

namespace volt::dist::nccl_watchdog {

namespace {
ncclResult_t state_of(ncclComm_t comm) {
  ncclResult_t s = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &s);
  return rc != ncclSuccess ? rc : s;
}
}  // namespace

std::string async_error(ncclComm_t comm) {
  if (!comm) return "";
  const ncclResult_t s = state_of(comm);
  return s == ncclSuccess || s == ncclInProgress ? "" : ncclGetErrorString(s);
}

bool settled(ncclComm_t comm) { return comm && state_of(comm) == ncclSuccess; }

Outcome watch_comm(ncclComm_t* comm, const std::function<bool()>& done, double timeout_s) {
  return watch({done, [comm] { return async_error(*comm); }}, timeout_s, [comm] {
    if (*comm) ncclCommAbort(*comm);
    *comm = nullptr;
  });
}

ncclComm_t init_comm(int device, int nranks, const ncclUniqueId& id, int rank, double timeout_s,
                     const std::function<std::string(const Outcome&)>& describe) {
  VOLT_CUDA_CHECK(cudaSetDevice(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (comm) ncclCommAbort(comm);
    Outcome o;
    o.kind = Outcome::Kind::Failed;
    o.error = std::string("ncclCommInitRankConfig returned ") + ncclGetErrorString(rc);
    o.aborted = true;
    VOLT_FAIL(describe(o));
  }
  const Outcome o = watch_comm(&comm, [&comm] { return settled(comm); }, timeout_s);
  if (o.kind != Outcome::Kind::Done) VOLT_FAIL(describe(o));
  return comm;
}

bool finalize_or_abort(ncclComm_t comm, double timeout_s) {
  if (!comm) return true;
  const ncclResult_t rc = ncclCommFinalize(comm);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    ncclCommAbort(comm);
    return false;
  }
  if (watch_comm(&comm, [&comm] { return settled(comm); }, timeout_s).kind != Outcome::Kind::Done) return false;
  ncclCommDestroy(comm);
  return true;
}

}  // namespace volt::dist::nccl_watchdog
#endif
