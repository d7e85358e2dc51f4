#pragma once
/// @file
/// CPU intra-op threads (the BLAS back end's thread pool; Volt's own loops are single-threaded). Data-parallel
/// CPU runs use one process per core, so each process should use cores / processes threads. The environment
/// variable VOLT_NUM_THREADS, when set, is applied at start-up.
namespace volt {

void set_num_threads(int n);  ///< n >= 1
int get_num_threads();

}  // namespace volt
