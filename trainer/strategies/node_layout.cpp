#include <volt/trainer/strategies/node_layout.h>

#include <sstream>

#include <volt/runtime/error.h>

namespace volt {

namespace {
std::string processes(int64_t n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }
}  // namespace

NodeLayout node_layout(int world_size, int global_rank, int num_nodes, int devices_per_node) {
  VOLT_CHECK(num_nodes >= 1, "Trainer: num_nodes=", num_nodes, " must be >= 1");
  VOLT_CHECK(devices_per_node >= 0, "Trainer: ", devices_per_node, " devices per node; expected >= 1 (or \"auto\")");
  VOLT_CHECK(world_size >= 1 && global_rank >= 0 && global_rank < world_size, "Trainer: global rank ", global_rank,
             " is outside a world of ", world_size, " processes");
  NodeLayout l;
  l.num_nodes = num_nodes;
  if (devices_per_node == 0) {
    VOLT_CHECK(world_size % num_nodes == 0, "Trainer: the launcher started ", processes(world_size),
               ", which do not split evenly over num_nodes=", num_nodes, " (devices=\"auto\" takes ",
               "world_size / num_nodes per node); start a multiple of ", num_nodes, " processes (e.g. mpirun -np ",
               num_nodes * ((world_size + num_nodes - 1) / num_nodes), ") or set num_nodes to a divisor of ",
               world_size);
    l.devices_per_node = world_size / num_nodes;
  } else {
    const int64_t want = static_cast<int64_t>(num_nodes) * devices_per_node;
    VOLT_CHECK(want == world_size, "Trainer: num_nodes=", num_nodes, " x devices=", devices_per_node, " = ",
               processes(want), ", but the launcher started ", world_size, " (world size ", world_size, "); start ",
               processes(want), " (mpirun -np ", want, ", ", devices_per_node, " per node), or set num_nodes and devices ",
               "so that num_nodes x devices = ", world_size, " (e.g. num_nodes=", num_nodes == 1 ? 1 : world_size,
               ", devices=", num_nodes == 1 ? world_size : 1, ", or devices=\"auto\")");
    l.devices_per_node = devices_per_node;
  }
  l.node_rank = global_rank / l.devices_per_node;
  l.local_rank = global_rank % l.devices_per_node;
  return l;
}

std::string local_rank_disagreement(const NodeLayout& layout, int global_rank, int launcher_local_rank) {
  if (launcher_local_rank == layout.local_rank) return "";
  std::ostringstream os;
  os << "DDP: warning: rank " << global_rank << ": the launcher reports local rank " << launcher_local_rank
     << " on this host, but num_nodes=" << layout.num_nodes << " x devices=" << layout.devices_per_node
     << " places global rank " << global_rank << " on node " << layout.node_rank << " as local rank "
     << layout.local_rank << ". The processes are not placed node by node (" << layout.devices_per_node
     << " consecutive ranks per machine): GPU selection, prepare_data and per-node shared datasets follow the "
        "launcher's local rank, node_rank() follows num_nodes x devices. If the job spans "
     << layout.num_nodes << " machines, start " << layout.devices_per_node
     << " process(es) per node in rank order (mpirun --map-by ppr:" << layout.devices_per_node
     << ":node, or srun --ntasks-per-node " << layout.devices_per_node << ")";
  return os.str();
}

int64_t effective_batch_size(int64_t batch_size, int64_t accumulate_grad_batches, int world_size) {
  VOLT_CHECK(batch_size >= 0 && accumulate_grad_batches >= 1 && world_size >= 1, "effective_batch_size: batch_size=",
             batch_size, ", accumulate_grad_batches=", accumulate_grad_batches, ", world_size=", world_size,
             "; expected >= 0, >= 1 and >= 1");
  return batch_size * accumulate_grad_batches * world_size;
}

}  // namespace volt
