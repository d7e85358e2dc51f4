// GoogleTest main for the multi-rank suites: every rank runs every test and asserts; only rank 0 prints.
// Launch with `mpirun -np N test_distributed` (or run it alone: one rank).
#include <gtest/gtest.h>
#include <mpi.h>

#include <volt/distributed/process_group.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  volt::dist::init_process_group("mpi", /*timeout_s=*/60);
  int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the job: the exit code is the max over ranks.
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", rank);
  volt::dist::finalize_process_group();
  MPI_Finalize();
  return worst;
}
