#pragma once
// The stream a CUDA launcher queues its kernels (and cuBLAS/cuDNN calls, memsets) on: the one backend::call
// resolved for the running call (kernels/backend/execution_context.h), the device's compute stream or a
// StreamScope's. Launchers never look a stream up themselves.
#include <cuda_runtime.h>

#include <volt/kernels/backend/execution_context.h>

namespace volt::cuda {

inline cudaStream_t launch_stream() { return static_cast<cudaStream_t>(backend::current_context().stream); }

}  // namespace volt::cuda
