#pragma once
/// @file
/// AsyncCheckpointing: checkpoints written in the background, so that training stalls only for a copy of the
/// state to host memory instead of the whole write (docs/reliability.md "Asynchronous checkpointing").
///
/// With this callback in TrainerOptions::callbacks, Trainer::save_checkpoint during training (ModelCheckpoint's
/// saves, a callback's own) works in two halves:
///  - at the step boundary, on the training thread: every tensor of the checkpoint (module state, optimizer
///    state) is copied to host memory and the trainer-state record is built, exactly as a synchronous save
///    would build it; then save_checkpoint returns and training goes on;
///  - on one background thread (rank 0): the same atomic writer as a synchronous save writes
///    `<stem>.safetensors` then `<stem>.json`, so the files are byte-identical to a synchronous save's and a
///    crash leaves the old checkpoint or the complete new one, never a torn one.
/// At most one write is in flight: a save while one is in flight first waits for it (two saves at one step,
/// such as a top-k file and "last", therefore stall for one write). A write that fails is reported at the next
/// training step: every rank raises a volt::Error naming the checkpoint and the cause (with several ranks,
/// rank 0's state is broadcast once per step while a write is in flight), or by the next save, or at the end of
/// fit, whichever comes first; fit never ends with a write still in flight or a failure unreported.
///
/// Synchronous always: saves from on_interrupt hooks ("interrupted", Preemption's "preempted", so that a requeue
/// follows a complete checkpoint) and checkpoint_layout = sharded (each rank writes its own shard file).
/// Host memory holds one extra copy of the checkpoint's tensors while a write is in flight.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <volt/trainer/callback.h>

namespace volt {

class Collectives;

class AsyncCheckpointing : public Callback {
 public:
  AsyncCheckpointing();
  ~AsyncCheckpointing() override;  ///< waits for the write in flight
  AsyncCheckpointing(const AsyncCheckpointing&) = delete;
  AsyncCheckpointing& operator=(const AsyncCheckpointing&) = delete;

  std::string state_key() const override { return "AsyncCheckpointing"; }
  /// While a write is in flight: is it done, and did it fail? (collective then: one broadcast)
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;

  // ---- used by Trainer::save_checkpoint and the fit loop -------------------------------------------------
  /// Waits for the write in flight (rank 0) and raises its failure on every rank. Nothing when no write was
  /// queued since the last call. (collective)
  void settle(Collectives& collectives);
  /// Rank 0: queues `write` (the background half of a save of `stem`). The caller settled first.
  void submit(const std::string& stem, std::function<void()> write);
  /// Every rank, after the save that queued a write on rank 0.
  void note_queued() { queued_ = true; }

  /// Writes finished so far (rank 0), and the seconds the last one took in the background.
  int64_t writes_done() const;
  double last_write_seconds() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;  ///< the queued write, empty when idle
  std::string job_stem_;
  bool busy_ = false;          ///< a write is queued or running
  bool stop_ = false;
  std::string error_;          ///< the failure of the last write, until settled
  int64_t done_ = 0;
  double last_seconds_ = 0;
  bool queued_ = false;        ///< every rank: a save queued a write that is not settled yet
  std::thread worker_;
};

}  // namespace volt
