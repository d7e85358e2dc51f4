#pragma once
// Internal (not part of the public API): NCCL communicators made, watched and ended without blocking, under
// the rule of nccl_watchdog.h. Include only where VOLT_WITH_CUDA is 1 (it needs <nccl.h>).
//
// Every communicator is created with config.blocking = 0: ncclCommInitRankConfig, each collective and
// ncclCommFinalize may return ncclInProgress and finish in the background, and ncclCommGetAsyncError then says
// ncclInProgress (still going), ncclSuccess (done) or the error. A peer that never arrives therefore leaves the
// host free to time out and call ncclCommAbort, instead of hanging inside NCCL.
#include <nccl.h>

#include <functional>
#include <string>

#include <volt/distributed/nccl_watchdog.h>

namespace volt::dist::nccl_watchdog {

/// The asynchronous error NCCL holds for `comm` as text (ncclGetErrorString), "" while it reports ncclSuccess or
/// ncclInProgress, or for a null comm.
std::string async_error(ncclComm_t comm);
/// Whether `comm`'s background work (creation, an enqueue, finalising) has finished: its state is ncclSuccess.
bool settled(ncclComm_t comm);

/// watch() bound to a communicator: probes `done` and async_error(*comm); on an error or a timeout it calls
/// ncclCommAbort(*comm) and sets *comm to nullptr.
Outcome watch_comm(ncclComm_t* comm, const std::function<bool()>& done, double timeout_s);

/// Creates rank `rank`'s communicator of `nranks` ranks on CUDA device `device` from `id` without blocking, and
/// watches its creation with `timeout_s` (every rank of the communicator must call it). On an error, or when the
/// others do not all arrive in time, the half-made communicator is aborted and volt::Error is thrown with the text
/// `describe(outcome)` (the caller names the collective that needed it and who is missing).
ncclComm_t init_comm(int device, int nranks, const ncclUniqueId& id, int rank, double timeout_s,
                     const std::function<std::string(const Outcome&)>& describe);

/// Ends `comm`: ncclCommFinalize (which completes its outstanding work) watched with `timeout_s`, then
/// ncclCommDestroy; when finalising fails or takes longer (a peer is gone) the communicator is aborted instead.
/// Returns false when it was aborted. Never throws.
bool finalize_or_abort(ncclComm_t comm, double timeout_s);

}  // namespace volt::dist::nccl_watchdog
