#pragma once
// CUDA graph capture primitives for volt::Graph (kernels/graph.h): stream capture of a device's compute stream,
// a graph-private memory pool in the caching allocator, instantiation and launch. Internal (not installed).
//
// A capture on `device` makes the device's compute stream capture (mode: relaxed, so that the caching allocator
// may still cudaMalloc a fresh block; nothing calls cudaFree while a capture is open), and routes every block
// allocated on that device from then on to a new private pool until end_capture/abort_capture. Every block freed
// on the device while the pool is active joins that pool (blocks the graph read must not be handed to eager
// work while the graph may replay). After the capture, blocks of the pool freed later go back to it, never to the
// device's general pool, until release_pool(): the graph's replays keep writing into them.
//
// In a build without CUDA every function throws volt::Error ("built without CUDA").
#include <cstddef>
#include <cstdint>
#include <memory>

#include <volt/runtime/device.h>

namespace volt::cuda_graph {

struct Exec;  // an instantiated graph (cudaGraphExec_t and its cudaGraph_t)

// Starts capturing the current compute stream of `device` and opens a private pool there; returns its id.
// Throws when the stream is already capturing or the device is not a usable CUDA device.
uint64_t begin_capture(Device device);
// Ends the capture begun by begin_capture(device) and instantiates it. The pool stays reserved for the graph.
// Throws volt::Error naming the CUDA error when the capture was invalidated (an operation that cannot be captured
// ran on the stream, e.g. a synchronous copy or a host sync) or the instantiation failed; the pool is then
// released and the stream left out of capture mode.
std::shared_ptr<Exec> end_capture(Device device, uint64_t pool);
// Ends a capture abandoned by an exception (discarding the graph) and releases its pool. Never throws.
void abort_capture(Device device, uint64_t pool) noexcept;
// Launches the graph on the current compute stream of `device` (asynchronous).
void launch(const Exec& exec, Device device);
// Number of nodes (kernels, copies, memsets) of the captured graph.
size_t num_nodes(const Exec& exec);
// Copies `nbytes` from host memory `src` to device memory `dst` on the compute stream of `device`, in stream
// order with the work already queued there (used to refresh a graph's dynamic arguments before a launch);
// `src` may be reused as soon as the call returns.
void copy_to_device_async(void* dst, const void* src, size_t nbytes, Device device);
// Whether the current compute stream of `device` is capturing.
bool is_capturing(Device device);
// Returns the pool's blocks to the device's general pool once the device has finished the work queued so far
// (the graph's last replay): called when the graph is destroyed. Blocks of the pool still held by live tensors
// go to the general pool when those are freed. Never throws.
void release_pool(Device device, uint64_t pool) noexcept;

}  // namespace volt::cuda_graph
