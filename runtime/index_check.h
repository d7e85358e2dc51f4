#pragma once
/// @file
/// Index range checks that GPU kernels make themselves, reported by the host at the device's next
/// synchronisation (internal; kernels/cuda/index.cu writes them, kernels/ops/index_ops.cpp passes the site).
///
/// An op whose indices live on a GPU cannot read them on the host without stalling the device's queue for every
/// call, and cannot at all while a CUDA graph is being captured. So the kernel checks each index as it reads it:
/// a bad one is not used (its output row is zero, its gradient row dropped) and the first one is recorded in a
/// small block of page-locked host memory mapped into the device. synchronize(device) and every synchronous copy
/// to the host (item(), to(cpu)) then throw volt::Error naming the op, the position and the value, once.
/// CPU kernels throw the same message at once.
#include <cstdint>
#include <string>

namespace volt {

/// Which op a kernel's index check serves (it names the op in the message).
enum class IndexCheckSite : int32_t { none = 0, embedding = 1 };

/// One GPU's record of the first failed check since the host last reported one.
struct IndexCheckRecord {
  int32_t site;  ///< an IndexCheckSite; 0 while nothing failed (a kernel claims it with atomicCAS)
  int32_t unused;
  int64_t position;  ///< where in the index tensor (flattened)
  int64_t value;     ///< the bad index
  int64_t limit;     ///< the indexed dimension's size
};

namespace detail {
/// The message of a failed check: "embedding: indices value 7 at position 3 is out of range for ...".
std::string index_check_message(IndexCheckSite site, int64_t position, int64_t value, int64_t limit);
/// GPU `device_index`'s record as the device addresses it (mapped page-locked host memory, made on first use);
/// nullptr when it cannot be made (the kernels then skip bad indices without recording them).
IndexCheckRecord* index_check_record(int device_index);
/// Throws the check GPU `device_index` recorded since the last report (its kernels have finished: call after a
/// synchronisation), and clears it. Does nothing when none failed or no record was made.
void raise_index_checks(int device_index);
}  // namespace detail

}  // namespace volt
