#pragma once
/// @file
/// A Batch is what a Dataset returns and a DataLoader yields: an input tensor, a target tensor and any number of
/// named extra tensors (`fields`: masks, lengths, sample weights, ...). A single sample is also a Batch, just
/// without the leading batch dimension.
///
/// @code
///   Batch s;
///   s.input = image;                      // (C, H, W)
///   s.target = label;                     // ()
///   s.fields["mask"] = mask;              // (H, W)
///   ... loader ...
///   const Tensor& m = batch.field("mask");  // (B, H, W): the default collate stacks every field
/// @endcode
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <volt/kernels/tensor.h>

namespace volt::data {

struct Batch {
  Tensor input;   ///< (B, ...) for a batch, (...) for a sample
  Tensor target;  ///< (B, ...) for a batch, (...) for a sample; may be undefined (unlabelled data)
  /// Named extra tensors, each (B, ...) for a batch and (...) for a sample, kept in name order. A default-collated
  /// batch has the fields its samples have (every sample must have the same names).
  std::map<std::string, Tensor> fields;

  /// The number of samples: the leading dimension of `input` (1 for a 0-d input, 0 when undefined). Fields do
  /// not count.
  int64_t size() const;
  /// The field `name`; throws volt::Error naming the missing key and the present ones.
  const Tensor& field(const std::string& name) const;
  Tensor& field(const std::string& name);
  bool has_field(const std::string& name) const { return fields.count(name) > 0; }
  /// Input, target and every field moved to `device`. With non_blocking and pinned host tensors the
  /// host-to-device copies are asynchronous (the caller must not reuse the host buffers until they complete).
  Batch to(Device device, bool non_blocking = false) const;
  /// to(device, true) for a batch that is used later: pinned contiguous tensors are copied on the device's copy
  /// stream, and the compute stream is NOT yet ordered after those copies, so work queued meanwhile (the current
  /// step) does not wait for them. Call wait_for_upload() before queuing anything that reads the batch.
  Batch upload_ahead(Device device) const;
  /// Orders the device's compute stream after the copies of upload_ahead() (no host sync); a no-op otherwise.
  void wait_for_upload();
  /// The copies upload_ahead() left for wait_for_upload() (null when none).
  struct PendingUpload;
  std::shared_ptr<PendingUpload> pending_upload;
  /// The total bytes of input, target and fields.
  size_t nbytes() const;
};

}  // namespace volt::data
