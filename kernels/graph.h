#pragma once
/// @file
/// Graph capture: record the kernels a piece of code launches on one device once, then replay them as a whole.
///
/// On a GPU a Graph is a CUDA graph: capture_begin() puts the device's compute stream in capture mode, the code
/// runs on the host as usual but its kernels, copies and memsets are recorded instead of run, and replay()
/// launches the whole recording with one call, without the host cost of the ops, autograd and the launches. On
/// the CPU a Graph records every backend kernel call with its arguments and replay() runs them again in order:
/// the same semantics (and the same pitfalls), so that code written for capture is tested without a GPU.
///
/// What a replay sees:
///  - The same tensors (the same memory) as the capture. Inputs that change from replay to replay are copied
///    into tensors created before the capture ("static inputs"); outputs are read from the tensors the capture
///    produced (keep them, e.g. with keep()). Memory allocated during a CUDA capture comes from a pool private to
///    the graph, so no eager allocation ever aliases it while the graph lives.
///  - The same host arguments: a learning rate or a step count passed to a kernel as a number is frozen at its
///    captured value. Values that change per replay must live in device memory: dynamic() reserves such a block
///    and fills it from the host before every replay. The optimizers (nn/optim.h) and random ops (dropout,
///    rand, randn: philox()) do this by themselves, so a captured training step stays bit-identical to the eager
///    one.
///  - No host reads: item(), to_vector() and copies to the host throw while capturing (there is nothing to read
///    yet), as does anything that synchronises with the device.
///
/// What the caller must keep:
///  - Every tensor the recording reads or writes that was made before the capture (parameters, optimizer state,
///    buffers, static inputs) must be updated in place, never replaced, while the graph may replay: a replaced
///    tensor's memory can go to other tensors, and the replay would write into them. The optimizers refuse a
///    replay whose parameters or state were replaced (load_state_dict, a new group, a frozen parameter).
///  - Generators passed to random ops, and optimizers, must outlive the graph (its refreshes read them).
///  - On a GPU only the capturing thread allocates from the graph's pool; other threads must not launch work on
///    the device's compute stream during the capture (it would be captured).
///  - Replays run the same kernels with the same arguments as the eager code: on the CPU the results are
///    bit-identical, on a GPU too wherever the kernels are deterministic.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include <volt/kernels/optim_hyper.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/device.h>
#include <volt/runtime/generator.h>

namespace volt {

class Graph {
 public:
  /// A graph of `device`'s work (the CPU or a usable GPU).
  explicit Graph(Device device);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Starts recording this thread's work on the device. One capture per thread at a time; a graph is captured
  /// once (make a new Graph to capture again).
  void capture_begin();
  /// Ends the recording. Throws volt::Error when the recorded work cannot be replayed (on a GPU: an operation
  /// that cannot be captured ran, e.g. a host synchronisation); the graph is then empty.
  void capture_end();
  /// Ends a capture left by an exception, discarding what was recorded. Never throws.
  void capture_abort() noexcept;

  /// Runs the recording once, in stream order after the work already queued on the device. First every `valid`
  /// given to dynamic() is asked; when one says no (the captured work no longer fits, e.g. an optimizer's
  /// hyperparameters changed in a way its kernels were specialised on), nothing runs or changes and replay()
  /// returns false (the caller runs the work eagerly, or captures a new graph). Otherwise every `refresh` fills
  /// its block, the recording runs, and replay() returns true.
  bool replay();

  Device device() const { return device_; }
  bool captured() const;
  /// Recorded operations: CPU kernel calls, or the CUDA graph's nodes.
  size_t num_nodes() const;
  /// Replays so far.
  int64_t replays() const { return replays_; }

  /// Keeps `t`'s memory alive as long as the graph (a static input or output).
  void keep(const Tensor& t);

  /// While capturing: `nbytes` of device memory (8-byte aligned, at most 64 KiB per graph in all) that the
  /// captured kernels read, filled before every replay by `refresh(host_bytes)` from the host (host_bytes holds
  /// the block's previous content). `valid`, when given, is asked before any refresh and may refuse the replay.
  /// Returns the device address.
  void* dynamic(size_t nbytes, std::function<void(void*)> refresh, std::function<bool()> valid = {});

  /// The random-number arguments of a draw of `counters` Philox counters from `gen` by a kernel on the
  /// capturing device: the key and first counter are read at run time from a dynamic block holding the
  /// generator's (seed, offset) at each replay, so every replay draws fresh numbers, exactly those the same
  /// code run eagerly would draw, and `gen` advances by the capture's whole draw per replay. Returns
  /// {offset within the capture, pointer to that block}.
  std::pair<uint64_t, const uint64_t*> philox(Generator& gen, uint64_t counters);
  /// While capturing: how many counters the capture has drawn from `gen` so far (0 before its first draw), and
  /// setting that back, so that code run again draws the counters it drew before (activation recomputation,
  /// kernels/checkpoint.h); the position must then be set forward again to where it was.
  uint64_t draw_position(const Generator& gen) const;
  void set_draw_position(Generator& gen, uint64_t position);

  /// The graph capturing `device`'s work on this thread, or nullptr.
  static Graph* capturing(Device device);
  /// Throws volt::Error naming `what` when this thread is capturing `device`'s work (`what` needs a host read
  /// or a synchronisation, which cannot be captured).
  static void check_not_capturing(Device device, std::string_view what);

  struct Impl;

 private:
  Device device_;
  int64_t replays_ = 0;
  std::unique_ptr<Impl> impl_;
};

/// The capture-aware forms of adam_step_multi_ / sgd_step_multi_ (kernels/ops.h) that the optimizers use while a
/// Graph captures: the update's scalars (learning rate, bias corrections, ...) are read at run time from
/// `dynamic`, a block of optimizer_dynamic_bytes() from Graph::dynamic() that write_adam_dynamic /
/// write_sgd_dynamic fill from the host before each replay; h's flags (weight decay on or off, AdamW, amsgrad,
/// momentum, Nesterov, first step) are fixed at capture. The updates equal the eager ops bit for bit.
void adam_step_multi_dynamic_(const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic);
void sgd_step_multi_dynamic_(const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic);
size_t optimizer_dynamic_bytes();
void write_adam_dynamic(const AdamHyper& h, void* host_bytes);
void write_sgd_dynamic(const SgdHyper& h, void* host_bytes);

}  // namespace volt
