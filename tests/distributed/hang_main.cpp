// A job in which the last rank stops (SIGSTOP, as a hung or debugger-held process would) between two
// collectives. The other ranks time out in the next one and must name the stuck rank (number, pid, host, that
// it is stopped) and the last collective it entered, from the flight recorder (distributed/flight_recorder.h),
// which needs nothing from the stuck rank. Driven by check_hang.cmake.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>

int main() {
  auto& pg = volt::dist::init_process_group("mpi", /*timeout_s=*/3);
  volt::Tensor t = volt::ones({4});
  pg.all_reduce(t);  // #1
  pg.barrier();      // #2
  std::printf("rank %d: pid %d entered two collectives\n", pg.rank(), static_cast<int>(::getpid()));
  std::fflush(stdout);
  const int stuck = pg.world_size() - 1;
  if (pg.rank() == stuck) {
    ::raise(SIGSTOP);
    _exit(0);  // woken only by the job's teardown: leave without another collective
  }
  try {
    pg.all_reduce(t);  // #3: the stopped rank never comes
    std::printf("rank %d: UNEXPECTED success\n", pg.rank());
  } catch (const volt::Error& e) {
    std::printf("rank %d: caught: %s\n", pg.rank(), e.what());
  }
  std::fflush(stdout);
  // No SIGCONT from here: woken early, the stopped rank would exit while a slower peer is still writing its
  // report. MPI_Abort's teardown ends it (Open MPI continues a stopped process before terminating it).
  volt::dist::finalize_process_group();  // broken group: MPI_Abort
  return 0;
}
