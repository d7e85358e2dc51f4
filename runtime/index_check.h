#pragma once
/// @file
/// Index range checks that GPU kernels make themselves, reported by the host at the device's next
/// synchronisation (internal; kernels/cuda/index.cu and loss.cu write them through kernels/cuda/index_check.cuh;
/// the ops in kernels/ops/index_ops.cpp, scan_sort_ops.cpp, nn_ops.cpp and fused_ops.cpp pass the site).
///
/// An op whose indices live on a GPU cannot read them on the host without stalling the device's queue for every
/// call, and cannot at all while a CUDA graph is being captured. So the kernel checks each index as it reads it:
/// a bad one is not used (its output row is zero, its gradient row dropped) and the first one is recorded in a
/// small record in device memory (claimed with a device atomic). synchronize(device), every synchronous copy to
/// the host (item(), to(cpu)) and every copy from the device to another GPU copy the record back in the same queue,
/// just before they wait, and then throw volt::Error naming the op, the position and the value, once. Waits on
/// other streams or events do not look. CPU kernels throw the same message at once.
#include <cstdint>
#include <string>

namespace volt {

/// Which op a kernel's index check serves (it names the op in the message). The first six check indices into a
/// dimension; the last four check class targets, which may also equal the loss's ignore_index.
enum class IndexCheckSite : int32_t {
  none = 0,
  embedding = 1,
  index_select = 2,
  gather = 3,
  scatter_add = 4,
  index_add = 5,
  one_hot = 6,
  cross_entropy = 7,
  nll_loss = 8,
  fused_cross_entropy = 9,
  linear_cross_entropy = 10,
};

/// What a kernel checks its indices for: the op, and the op's `dim` argument when it has one (-1 when not; the
/// message names it). `position_offset` is where the kernel's index tensor starts in the op's (a chunk's
/// targets), added to the position the message names.
struct IndexCheck {
  IndexCheckSite site = IndexCheckSite::none;
  int32_t dim = -1;
  int64_t position_offset = 0;
};

/// One GPU's record of the first failed check since the host last reported one.
struct IndexCheckRecord {
  int32_t claim;  ///< 0 until a kernel claims the record (atomicCAS); it then writes the rest, `site` last
  int32_t site;   ///< an IndexCheckSite; 0 while nothing has been recorded
  int64_t position;  ///< where in the index tensor (flattened)
  int64_t value;     ///< the bad index
  int64_t limit;     ///< the indexed dimension's size (the number of classes for a loss)
  int64_t dim;       ///< IndexCheck::dim
};

namespace detail {
/// The message of a failed check: "embedding: indices value 7 at position 3 is out of range for ...".
std::string index_check_message(IndexCheck check, int64_t position, int64_t value, int64_t limit);
/// GPU `device_index`'s record (device memory, made on first use, zeroed); nullptr when it cannot be made, e.g.
/// first asked for during a graph capture (the kernels then drop bad indices without recording them; a capture
/// makes it before it starts, runtime/cuda_graph.cpp).
IndexCheckRecord* index_check_record(int device_index);
/// Enqueues the record's copy to its host mirror on `stream` (a cudaStream_t), when the record exists: called
/// right before the host waits for that stream.
void fetch_index_checks(int device_index, void* stream);
/// After the wait: throws the check the fetched record holds, and clears the record (the device is idle up to
/// here). Does nothing when none failed or nothing was fetched.
void raise_index_checks(int device_index);
}  // namespace detail

}  // namespace volt
