#pragma once
// A Batch is what a Dataset returns and a DataLoader yields: an input tensor and a target tensor. A single
// sample is also a Batch, just without the leading batch dimension.
#include <cstdint>

#include "runtime/tensor.h"

namespace volt::data {

struct Batch {
  Tensor input;   // (B, ...) for a batch, (...) for a sample
  Tensor target;  // (B, ...) for a batch, (...) for a sample; may be undefined (unlabelled data)

  // The number of samples: the leading dimension of `input` (1 for a 0-d input, 0 when undefined).
  int64_t size() const;
  // Both tensors moved to `device`. With non_blocking and pinned host tensors the host-to-device copies are
  // asynchronous on the current stream (the caller must not reuse the host buffers until they complete).
  Batch to(Device device, bool non_blocking = false) const;
};

}  // namespace volt::data
