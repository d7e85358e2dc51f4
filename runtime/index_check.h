#pragma once
/// @file
/// Index range checks that GPU kernels make themselves, reported by the host at the device's next
/// synchronisation (internal; kernels/cuda/index.cu writes them, kernels/ops/index_ops.cpp passes the site:
/// embedding and index_select).
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

/// Which op a kernel's index check serves (it names the op in the message).
enum class IndexCheckSite : int32_t { none = 0, embedding = 1, index_select = 2 };

/// One GPU's record of the first failed check since the host last reported one.
struct IndexCheckRecord {
  int32_t claim;  ///< 0 until a kernel claims the record (atomicCAS); it then writes the rest, `site` last
  int32_t site;   ///< an IndexCheckSite; 0 while nothing has been recorded
  int64_t position;  ///< where in the index tensor (flattened)
  int64_t value;     ///< the bad index
  int64_t limit;     ///< the indexed dimension's size
};

namespace detail {
/// The message of a failed check: "embedding: indices value 7 at position 3 is out of range for ...".
std::string index_check_message(IndexCheckSite site, int64_t position, int64_t value, int64_t limit);
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
