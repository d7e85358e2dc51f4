#include "volt/config.h"
#include "distributed/process_group.h"
#if VOLT_WITH_CUDA && VOLT_WITH_MPI
#error "todo"
#else
namespace volt::dist {
std::unique_ptr<ProcessGroup> make_nccl_group() {
  VOLT_FAIL("init_process_group: backend 'nccl' is unavailable: Volt was built without ",
            VOLT_WITH_CUDA ? "MPI (needed to bootstrap NCCL)" : "CUDA");
}
}  // namespace volt::dist
#endif
