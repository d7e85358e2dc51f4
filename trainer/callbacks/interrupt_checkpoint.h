#pragma once
/// @file
/// InterruptCheckpointWriter: a callback that writes the checkpoint of some interrupts itself (Preemption, for
/// the scheduler's warning signal). A ModelCheckpoint leaves out its own "interrupted" write for such a stop,
/// so the state is written once. Its own header, so that ModelCheckpoint need not know the callbacks that do it.

namespace volt {

class Trainer;

class InterruptCheckpointWriter {
 public:
  virtual ~InterruptCheckpointWriter() = default;
  /// True when this callback writes the checkpoint of the interrupt now being handled (called from
  /// on_interrupt hooks; the same answer on every rank). (collective)
  virtual bool writes_interrupt_checkpoint(Trainer& trainer) = 0;
};

}  // namespace volt
