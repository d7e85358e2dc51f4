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
/// Host memory on rank 0 holds one extra copy of the checkpoint's tensors from the first save to the end of fit:
/// the buffers of a finished write are reused by the next snapshot (a copy into memory already mapped instead of
/// a fresh allocation of the whole checkpoint).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <volt/nn/module.h>
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
  /// Rank 0: the tensors of `state` copied to host memory of their own (into the buffers of the last write when
  /// names, shapes and dtypes match).
  nn::StateDict snapshot(const nn::StateDict& state);
  /// Rank 0: queues `write(tensors)` (the background half of a save of `stem`); the tensors' buffers are kept
  /// for the next snapshot afterwards. The caller settled first.
  void submit(const std::string& stem, nn::StateDict tensors, std::function<void(const nn::StateDict&)> write);
  /// The end of fit: settle, then drop the kept buffers. (collective)
  void finish(Collectives& collectives);
  /// Every rank, after the save that queued a write on rank 0.
  void note_queued() { queued_ = true; }

  /// Writes finished so far (rank 0), and the seconds the last one took in the background.
  int64_t writes_done() const;
  double last_write_seconds() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void(const nn::StateDict&)> job_;  ///< the queued write, empty when idle
  nn::StateDict job_tensors_;
  nn::StateDict spare_;        ///< the buffers of the last finished write
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
