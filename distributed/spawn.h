#pragma once
/// @file
/// Self-launch for multi-process CPU training without typing mpirun.
///
/// @code
///   int main(int argc, char** argv) {
///     int rc = 0;
///     if (volt::dist::spawn_workers_if_needed(argc, argv, /*nprocs=*/4, &rc)) return rc;  // the launcher
///     auto& pg = volt::dist::init_process_group();                                     // a worker
///     ...
///   }
/// @endcode
///
/// When this process is NOT already running under a launcher (no OMPI_/PMI_/SLURM_ rank variables) and
/// nprocs > 1, it runs `mpirun -np <nprocs> --oversubscribe <this executable> <argv[1..]>` and waits for it.
/// mpirun is taken from $VOLT_MPIRUN, else the first `mpirun` or `mpiexec` on PATH (Open MPI flags are used).
/// When run as root, OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 are added to the workers' environment, because Open MPI
/// otherwise refuses. Everything before the call runs in the launcher too, so call it first in main().
///
/// Returns false when the caller is a worker (or nprocs <= 1) and should continue; true when it launched the
/// job, with *exit_code set to the job's exit status (128 + signal number if mpirun was killed).
/// Throws volt::Error if no mpirun is found or it cannot be started.
namespace volt::dist {

bool spawn_workers_if_needed(int argc, char** argv, int nprocs, int* exit_code = nullptr);

}  // namespace volt::dist
