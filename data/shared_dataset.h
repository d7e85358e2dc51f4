#pragma once
/// @file
/// Node-shared preloaded datasets: in a distributed run, every process of a node would otherwise hold its own
/// copy of the (normalized, float) dataset in RAM. Here local rank 0 of each node reads and normalizes the files
/// ONCE into a POSIX shared-memory segment (dist::SharedTensor) and the other local ranks map it read-only, so a
/// node holds one copy whatever its number of ranks.
///
/// Contract:
///   * Collective over the group: every rank of `group` must call the same loads in the same order (they
///     broadcast a job id once and synchronise the ranks of each node).
///   * The returned tensors are read-only on local ranks > 0 (writing faults); datasets, splits and loaders only
///     read them. clone() for a private writable copy.
///   * The values are bit-identical to the single-process path (MnistDataset::load(...)->normalized(...)).
///   * Segment names are unique per job (rank 0's pid and start time, broadcast to every rank) and per file
///     (absolute path, size, modification time, normalization): `"/volt_mnist_<pid>_<time>_<file hash>_<kind>"`.
///     They are unlinked as soon as every local rank has mapped them, so nothing stays in /dev/shm.
#include <memory>
#include <string>

#include <volt/data/dataset.h>
#include <volt/distributed/process_group.h>

namespace volt::data {

/// True when loading once per node pays off: the default process group is initialised and this node runs more
/// than one of its ranks.
bool node_sharing_available();

/// The normalized MNIST split of `dir` (see MnistDataset::normalized: inputs f32 (N, 1, rows, cols), targets
/// i64 (N)), with both tensors held once per node in shared memory. Collective over `group`.
std::shared_ptr<TensorDataset> load_mnist_normalized_shared(const std::string& dir, bool train, double mean,
                                                            double std, dist::ProcessGroup& group);

/// The prefix every segment of this job starts with, after the "/volt_" of SharedTensor::segment_name:
/// "mnist_<pid of rank 0>_". For tests and cleanup scripts.
std::string shared_mnist_prefix(int64_t rank0_pid);

}  // namespace volt::data
