#pragma once
/// @file
/// Node-local shared-memory tensors: load a dataset once per node instead of once per rank.
///
/// Local rank 0 of each node creates a POSIX shared-memory segment, lets `fill` write the data into it, and
/// then every local rank maps it after a node-local barrier. The other local ranks map it READ-ONLY: writing
/// to the returned tensor on them faults (SIGSEGV); clone() it for a private writable copy. Once every local
/// rank has mapped it, local rank 0 unlinks the name, so nothing is left in /dev/shm even if the job crashes
/// later; the memory is freed when the last tensor viewing it goes away.
///
/// Every local rank must call create_or_attach with the same name, shape and dtype (it is collective over the
/// node). If `fill` throws on local rank 0, every local rank throws. The name must be unique among jobs running
/// at the same time on the node (include a job id if several jobs may share a node).
#include <functional>
#include <string>

#include <volt/distributed/process_group.h>

namespace volt::dist {

class SharedTensor {
 public:
  using FillFn = std::function<void(Tensor& data)>;  ///< writes the contents on local rank 0 (CPU, contiguous)

  /// `local_barrier` must synchronise exactly the processes of this node (ProcessGroup::local_barrier).
  static Tensor create_or_attach(const std::string& name, const Shape& shape, DType dtype, int local_rank,
                                 const std::function<void()>& local_barrier, const FillFn& fill);
  /// Same, with the group's local rank and node-local barrier.
  static Tensor create_or_attach(const std::string& name, const Shape& shape, DType dtype, ProcessGroup& group,
                                 const FillFn& fill) {
    return create_or_attach(name, shape, dtype, group.local_rank(), [&group] { group.local_barrier(); }, fill);
  }
  /// The POSIX object name used for `name` (`"/volt_<name>"`); for tests and cleanup scripts.
  static std::string segment_name(const std::string& name);
};

}  // namespace volt::dist
