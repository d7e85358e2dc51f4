#pragma once
/// @file
/// Preemption: a checkpoint on the scheduler's warning signal, an optional requeue, and the resume that follows
/// (docs/reliability.md "Preemption").
///
/// A cluster scheduler about to preempt a job (or end it at its time limit) can warn it first: SLURM sends the
/// signal named by `#SBATCH --signal=USR1@90` to every task 90 s ahead. While this callback lives, that signal
/// (PreemptionOptions::signal) takes the Trainer's graceful-interrupt path (trainer/interrupt_guard.h): fit
/// stops at the next step boundary that every rank agrees on (under DDP the ranks ask every 8 optimizer steps
/// mid-epoch; a signal to any one rank stops all), then on_interrupt
///  1. writes the checkpoint `<dir>/preempted` (a normal Trainer checkpoint, mid-epoch position included);
///     `dir` is PreemptionOptions::dirpath, else the first ModelCheckpoint's directory, else
///     `<log_dir>/checkpoints`, the same place a default ModelCheckpoint uses. A ModelCheckpoint does not also
///     write "interrupted" for that stop, so the grace period pays for one write, not two;
///  2. with auto_requeue, has rank 0 run `scontrol requeue <job id>` (SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID for
///     an array task, else SLURM_JOB_ID), after the checkpoint is complete. A missing job id, a command that
///     cannot start, exits non-zero or runs past requeue_timeout_s (then it is killed) is a warning on rank 0
///     and requeue_error() on every rank; fit still ends normally;
///  3. fit returns with trainer.interrupted() true (interrupt_signal() reports SIGTERM) and preempted() true.
///
/// The requeued job resumes with `trainer.fit(module, dm, preemption->resume_path(trainer))`: the newest
/// complete checkpoint where ckpt_path="last" looks (plus `dirpath`), or "" (a fresh start) when there is none,
/// so the same job script serves the first allocation and every requeued one.
///
/// The handler is installed by the constructor (so a warning during set-up, before fit, is not the signal's
/// default action, which would end the process) and the previous one comes back with the destructor. One
/// Preemption may live at a time.
#include <csignal>
#include <string>

#include <volt/trainer/callback.h>
#include <volt/trainer/callbacks/interrupt_checkpoint.h>

namespace volt {

struct PreemptionOptions {
  /// The warning signal. SIGUSR1 (SLURM's usual choice), SIGUSR2, SIGHUP, SIGALRM, SIGXCPU, ... ; not SIGINT or
  /// SIGTERM (the Trainer's interrupt already owns them) nor a signal that cannot be caught.
  int signal = SIGUSR1;
  /// Requeue the job through the scheduler once the checkpoint is written.
  bool auto_requeue = false;
  /// Where the checkpoint goes; empty: the first ModelCheckpoint's directory, else `<log_dir>/checkpoints`.
  std::string dirpath;
  /// The checkpoint's stem inside that directory.
  std::string filename = "preempted";
  /// The program run (found on PATH) as `<requeue_command> requeue <job id>`.
  std::string requeue_command = "scontrol";
  /// Seconds the requeue command may take before it is killed and reported.
  double requeue_timeout_s = 60;
};

class Preemption : public Callback, public InterruptCheckpointWriter {
 public:
  explicit Preemption(PreemptionOptions options = {});
  ~Preemption() override;
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  std::string state_key() const override { return "Preemption"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_interrupt(Trainer& trainer, TrainModule& module) override;

  /// The newest complete checkpoint in the directories ckpt_path="last" searches and in `dirpath`, or "" when
  /// there is none: what a (re)started job passes to fit as ckpt_path. Rank 0 looks; every rank gets its answer.
  /// (collective)
  std::string resume_path(Trainer& trainer);

  /// Whether the current interrupt is a preemption: the warning signal reached some rank. Decided once per fit,
  /// at the first call from an on_interrupt hook (this callback's or a ModelCheckpoint's). (collective)
  bool agree_preempted(Trainer& trainer);
  bool writes_interrupt_checkpoint(Trainer& trainer) override { return agree_preempted(trainer); }

  /// The last fit stopped for the warning signal.
  bool preempted() const { return preempted_; }
  /// The stem of the checkpoint it wrote ("" when the fit was not preempted).
  const std::string& checkpoint_path() const { return checkpoint_; }
  /// The job was requeued (auto_requeue and the command succeeded).
  bool requeued() const { return requeued_; }
  /// Why auto_requeue did not requeue ("" when it did or was not asked to); the same on every rank.
  const std::string& requeue_error() const { return requeue_error_; }
  const PreemptionOptions& options() const { return opt_; }

 private:
  /// Rank 0's requeue: "" on success, else what went wrong.
  std::string requeue() const;

  PreemptionOptions opt_;
  bool decided_ = false;
  bool preempted_ = false;
  bool requeued_ = false;
  std::string checkpoint_;
  std::string requeue_error_;
};

}  // namespace volt
