// A job in which the last rank exits without taking part in a collective. The other ranks must fail within
// the collective timeout with a clear message instead of hanging. Driven by check_early_exit.cmake.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>

#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>

int main(int argc, char** argv) {
  auto& pg = volt::dist::init_process_group("mpi", /*timeout_s=*/3);
  volt::Tensor t = volt::ones({4});
  pg.all_reduce(t);  // everyone takes part once
  std::printf("rank %d: first all_reduce ok (%g)\n", pg.rank(), t.to_vector<float>()[0]);
  std::fflush(stdout);
  if (pg.rank() == pg.world_size() - 1) {
    std::printf("rank %d: exiting early\n", pg.rank());
    std::fflush(stdout);
    _exit(0);  // simulates a crashed or finished peer: no finalize, no collective
  }
  try {
    pg.all_reduce(t);
    std::printf("rank %d: UNEXPECTED success\n", pg.rank());
  } catch (const volt::Error& e) {
    std::printf("rank %d: caught: %s\n", pg.rank(), e.what());
  }
  std::fflush(stdout);
  volt::dist::finalize_process_group();  // broken group: MPI_Abort
  return 0;
}
