// Started WITHOUT mpirun by CTest: re-launches itself with 2 ranks through spawn_workers_if_needed. Each worker
// checks it is one of 2 ranks and that an all_reduce sums over both; the launcher returns the job's status.
#include <cstdio>

#include <volt/distributed/process_group.h>
#include <volt/distributed/spawn.h>
#include <volt/kernels/ops.h>

int main(int argc, char** argv) {
  int rc = 0;
  if (volt::dist::spawn_workers_if_needed(argc, argv, 2, &rc)) {
    std::printf("launcher: workers exited with %d\n", rc);
    return rc;
  }
  auto& pg = volt::dist::init_process_group("auto", 30);
  volt::Tensor t = volt::full({2}, pg.rank() + 1.0);
  pg.all_reduce(t);
  bool ok = pg.world_size() == 2 && pg.backend_name() == "mpi" && t.to_vector<float>()[0] == 3.0f;
  std::printf("worker rank %d of %d (%s): sum %g %s\n", pg.rank(), pg.world_size(), pg.backend_name().c_str(),
              t.to_vector<float>()[0], ok ? "ok" : "WRONG");
  volt::dist::finalize_process_group();
  return ok ? 0 : 3;
}
