#pragma once
/// @file
/// What the other ranks of a group are doing, seen from this host without asking them: which are stopped and
/// where. Used when a signal arrives while this rank may be waiting for them (trainer/interrupt_guard.h) and in
/// the NCCL backend's failure reports. Ranks on other hosts are not visible.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <volt/distributed/process_group.h>

namespace volt::dist {

/// The ranks of `g` on this host whose process is stopped (SIGSTOP, job control, a debugger holding it), each
/// described as "rank <r> (pid <pid> on <host>, process stopped, last collective #<seq> <op>)" ("last collective
/// none" before its first), read from the group's flight recorder. Empty for one rank, or when the group has no
/// flight recorder (no shared memory). Reads only shared memory and /proc, so it is safe to call from another
/// thread while this one is blocked in a collective of `g`.
std::vector<std::string> stopped_peers(const ProcessGroup& g);

/// This rank's last collective in `g` as "#<seq> <op>", or "none" (also without a flight recorder: "unknown").
std::string last_collective(const ProcessGroup& g);

/// The flight recorder's sentence for a failure of collective `seq` on `g` (flight_recorder.h, report()), or ""
/// without one.
std::string flight_recorder_report(const ProcessGroup& g, uint64_t seq);

namespace detail {
/// Called when a group opens its flight recorder (ProcessGroup::set_peers): the functions above find it there.
/// The group keeps the recorder alive; an entry whose recorder is gone reads as none.
void remember_flight_recorder(const ProcessGroup* g, const std::shared_ptr<FlightRecorder>& recorder);
}  // namespace detail

}  // namespace volt::dist
