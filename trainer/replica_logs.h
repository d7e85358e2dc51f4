#pragma once
// Internal: where TrainModule::log records while a step runs in a dp/ddp2 replica's thread. The replica machinery
// (trainer/strategies/data_parallel.cpp) sets the sink and merges the records on the calling thread.
#include <cstdint>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>
#include <volt/trainer/log_options.h>

namespace volt {
namespace metrics {
class Metric;
}
namespace detail {

/// What log() recorded on one replica's thread.
struct ReplicaLogRecord {
  std::string name;
  Tensor value;                        ///< one element (undefined for a metric object)
  metrics::Metric* metric = nullptr;   ///< a metric object logged by reference
  LogOptions options;
  int64_t batch_size = 1;  ///< options.batch_size, else the replica's slice size
};
struct ReplicaLogs {
  int64_t slice_size = 0;
  std::vector<ReplicaLogRecord> records;
};

/// The log sink of this thread while it runs a replica (nullptr otherwise): TrainModule::log records there.
ReplicaLogs* replica_logs();

}  // namespace detail
}  // namespace volt
