#pragma once
/// @file
/// How a DDP job's processes map onto machines (upstream's num_nodes x devices):
/// @code{.unparsed}
///   world_size = num_nodes x devices_per_node, node_rank = global_rank / devices_per_node,
///   local_rank = global_rank % devices_per_node.
/// @endcode
/// The launcher (mpirun, srun) decides how many processes there are; these functions check that the Trainer's
/// options describe the same job, and fail with a message naming the numbers and the fix otherwise. They are
/// pure arithmetic: every rank computes the same answer, so a mismatch fails on every rank and nobody waits in a
/// collective.
#include <cstdint>
#include <string>

namespace volt {

struct NodeLayout {
  int num_nodes = 1;
  int devices_per_node = 1;  ///< processes per node
  int node_rank = 0;
  int local_rank = 0;  ///< global_rank % devices_per_node: where node-by-node placement puts this rank
};

/// `devices_per_node` 0 means devices="auto": the launcher's processes split evenly over num_nodes.
/// Throws volt::Error when num_nodes < 1, devices_per_node < 0, the rank is outside the world, or
/// world_size != num_nodes x devices_per_node (or is not divisible by num_nodes for "auto").
NodeLayout node_layout(int world_size, int global_rank, int num_nodes, int devices_per_node);

/// "" when the launcher's local rank (its rank among the processes on this host) is the layout's; otherwise a
/// warning for this rank naming both and what follows from the difference.
std::string local_rank_disagreement(const NodeLayout& layout, int global_rank, int launcher_local_rank);

/// Samples per optimizer step over the whole job: batch_size x accumulate_grad_batches x world_size.
int64_t effective_batch_size(int64_t batch_size, int64_t accumulate_grad_batches, int world_size);

}  // namespace volt
