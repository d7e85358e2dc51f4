#pragma once
// Internal: the replica machinery behind the dp and ddp2 strategies (trainer/strategies/dp.h): splitting a batch,
// running one step per replica on its own thread with this thread's autograd/autocast state, per-replica logging
// merged on the calling thread, and gathering the step outputs on the root device.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <volt/trainer/strategies/strategy.h>
#include <volt/trainer/replica_logs.h>
#include <volt/trainer/train_module.h>

namespace volt::detail {

class ModuleReplicas;

/// Splits every tensor of `batch` (input, target, each field) along dim 0 into at most `n` slices, as torch.chunk
/// does: slices of ceil(B / n) samples, the last ones smaller, and fewer than `n` when B < n. A batch with no
/// leading dimension to split (undefined or 0-d input, or B == 0) is one slice. A tensor whose dim 0 is not B
/// is a volt::Error naming it.
std::vector<data::Batch> split_batch(const data::Batch& batch, int n);

/// Gathers per-replica outputs (same keys in every replica): 0-d tensors are stacked to (replicas,), the others
/// concatenated along dim 0; differentiable (stack/cat), so a loss built from the result backpropagates into
/// every replica's graph. A key undefined in every replica stays undefined. Mismatched keys, a key defined in
/// some replicas only, or 0-d and n-d tensors under one key are errors naming the key.
StepOutput gather_step_outputs(const std::vector<StepOutput>& outputs);

/// Logs the replicas' records through `module.log` on the calling thread (inside the step's LogScope). Per name,
/// in order of first appearance: reduce_fx "mean" -> the mean weighted by each replica's batch size, "sum" ->
/// the sum, "min"/"max" -> the min/max; the batch size logged is the replicas' total. A metric object is logged
/// once. Different reduce_fx for one name across replicas is an error.
void merge_replica_logs(TrainModule& module, const std::vector<ReplicaLogs>& logs);

/// Threads that run replicas 1..workers of every step (replica 0 runs on the caller), kept for the strategy's
/// lifetime so that a step starts no thread and each replica keeps its thread (and its thread-local buffers).
class ReplicaPool {
 public:
  explicit ReplicaPool(int workers);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;
  int workers() const { return static_cast<int>(threads_.size()); }
  /// Runs fn(r) for every r in [0, n): r = 0 on the calling thread, r > 0 on worker r - 1; returns when all have
  /// returned. n - 1 must not exceed workers(); `fn` must not throw (catch inside).
  void run(int n, const std::function<void(int)>& fn);

 private:
  void loop(int worker);
  std::mutex mu_;
  std::condition_variable work_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0, pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

/// One data-parallel step on the calling thread's device: split `batch` over pool.workers() + 1 replicas, run
/// `step` on every slice concurrently (replica 0 on the calling thread, the others on the pool's, each with this
/// thread's grad mode and autocast state, its replica index (nn/replica.h) and its own random stream:
/// replica 0 draws from the global generator, replica r > 0 from a generator seeded from the global seed, the
/// global offset and r; graph nodes numbered from a range of its own, so the backward's summation order and
/// therefore the result do not depend on thread timing), rethrow the first replica's error, merge the logs,
/// gather the outputs.
/// `pool` runs the replicas (devices - 1 workers). `replicas` null: every replica runs `step` on `module` (the
/// shared module of virtual CPU devices). Otherwise replica r runs it on replicas->module(r) with
/// replicas->device(r) current: its slice is moved there, replicas->sync(r) copies the root's state in first
/// (trainer/strategies/module_replicas.h), and its outputs are moved to the root device before the gather.
StepOutput run_replicas(TrainModule& module, const data::Batch& batch, const StepFn& step, ReplicaPool& pool,
                        ModuleReplicas* replicas = nullptr);

}  // namespace volt::detail
