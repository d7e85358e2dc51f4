#pragma once
// The cache key of a cuDNN convolution plan (kernels/cuda/cudnn_ops.cu): everything the plan's descriptors and
// algorithm choice depend on. Host-only, so the key is tested on the CPU (tests/kernels/test_plan_cache.cpp).
#include <array>
#include <cstdint>

#include <volt/kernels/common/plan_cache.h>

namespace volt {

enum class ConvPlanKind : int64_t { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// How the algorithm is chosen: TF32 allowed for f32 (set_allow_tf32), and timed trials instead of the
// heuristics (set_cudnn_benchmark). A plan made in one mode is never reused in the other.
struct ConvPlanMode {
  bool tf32 = false;
  bool benchmark = false;
};

inline constexpr size_t kConvKeySize = 19;
using ConvKey = PlanKey<kConvKeySize>;
using ConvKeyHash = PlanKeyHash<kConvKeySize>;

// Where the mode lives in the key.
inline constexpr size_t kConvKeyTf32 = 3;
inline constexpr size_t kConvKeyBenchmark = 4;

// x: the input's (N, C, H, W); w: the filter's (OC, C / groups, KH, KW); conv: stride_h, stride_w, pad_h,
// pad_w, dil_h, dil_w. `dtype` is the DType's value.
inline ConvKey conv_plan_key(ConvPlanKind kind, int64_t device_index, int64_t dtype, ConvPlanMode mode,
                             const std::array<int64_t, 4>& x, const std::array<int64_t, 4>& w,
                             const std::array<int64_t, 6>& conv) {
  return ConvKey{{static_cast<int64_t>(kind), device_index, dtype, mode.tf32 ? 1 : 0, mode.benchmark ? 1 : 0, x[0],
                  x[1], x[2], x[3], w[0], w[1], w[2], w[3], conv[0], conv[1], conv[2], conv[3], conv[4], conv[5]}};
}

}  // namespace volt
