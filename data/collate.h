#pragma once
/// @file
/// Collation: turning the samples of one batch (each a Batch without the batch dimension) into a Batch.
///
/// default_collate stacks input, target and every field along a new dim 0, which is what Dataset::get_batch
/// and the DataLoader do unless DataLoaderOptions::collate replaces it (to pad sequences, build masks, keep
/// ragged data in fields, ...). A user collate returns any Batch it likes; the loader only requires size() > 0
/// to be meaningful to whoever consumes it.
#include <functional>
#include <vector>

#include <volt/data/batch.h>

namespace volt::data {

/// The samples of one batch in batch order -> the batch. The vector is the collate's to consume (it may move
/// tensors out of it). Called from loader worker threads, several at once: it must be thread-safe.
using CollateFn = std::function<Batch(std::vector<Batch>& samples)>;

/// Stacks each tensor of `samples` along a new dim 0: input (B, ...), target (B, ...) and fields[k] (B, ...).
/// Every sample must have the same shapes, dtypes and devices, a target in all or none, and the same field
/// names; a field that is undefined in every sample stays undefined. With `pinned`, CPU results are allocated
/// in page-locked memory (data/pinned_pool.h). Errors name the sample position and what differs.
Batch default_collate(const std::vector<Batch>& samples, bool pinned = false);

/// A copy of `batch` whose CPU tensors (input, target, fields) are in page-locked memory (plain memory when CUDA
/// is unusable); CUDA tensors are shared as they are.
Batch pinned_copy(const Batch& batch);

}  // namespace volt::data
