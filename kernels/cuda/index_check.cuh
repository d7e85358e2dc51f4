#pragma once
// The device side of the kernels' own index checks (runtime/index_check.h), shared by kernels/cuda/index.cu and
// loss.cu: a kernel that finds a bad index leaves its output alone (or zero) and records the first one it finds; the
// host reports it at the device's next synchronisation.
#include <cuda_runtime.h>

#include <cstdint>

#include <volt/kernels/tensor.h>
#include <volt/runtime/index_check.h>

namespace volt::cuda {

// The record of `t`'s GPU, or null for a check that names no op (a bad index is then skipped unreported) or when
// the record cannot be made.
inline IndexCheckRecord* index_check_record_for(const Tensor& t, IndexCheck check) {
  return check.site == IndexCheckSite::none ? nullptr : detail::index_check_record(t.device().index);
}

// Records a bad index unless an earlier one claimed the record. The claim comes first and `site` last, so a record
// read while the kernel runs is either empty or whole.
__device__ inline void record_bad_index(IndexCheckRecord* rec, IndexCheck check, int64_t position, int64_t value,
                                        int64_t limit) {
  if (rec == nullptr || atomicCAS(reinterpret_cast<int*>(&rec->claim), 0, 1) != 0) return;
  rec->position = check.position_offset + position;
  rec->value = value;
  rec->limit = limit;
  rec->dim = check.dim;
  __threadfence();
  *reinterpret_cast<volatile int32_t*>(&rec->site) = static_cast<int32_t>(check.site);
}

// Whether index r (at `position` of the index tensor) lies outside [0, D); if so and `report`, it is recorded.
__device__ inline bool out_of_range(int64_t position, int64_t r, int64_t D, IndexCheckRecord* rec, IndexCheck check,
                                    bool report) {
  if (r >= 0 && r < D) return false;
  if (report) record_bad_index(rec, check, position, r, D);
  return true;
}

}  // namespace volt::cuda
