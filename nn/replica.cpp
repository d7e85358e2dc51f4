#include <volt/nn/replica.h>

#include <volt/runtime/error.h>

namespace volt::nn {

namespace {
thread_local int t_replica = 0;
}

int replica_index() { return t_replica; }

ReplicaScope::ReplicaScope(int index) : prev_(t_replica) {
  VOLT_CHECK(index >= 0, "nn::ReplicaScope: the replica index must be >= 0, got ", index);
  t_replica = index;
}
ReplicaScope::~ReplicaScope() { t_replica = prev_; }

}  // namespace volt::nn
