#pragma once
// Fills behind the factory ops (kernels/ops/factory_ops.cpp; kernels/cpu/factory.cpp, kernels/cuda/factory.cu).
// out is contiguous; element i depends only on its index (and for the random fills on (seed, offset, i), the
// Philox contract of runtime/philox.h, bit-identical on both backends).
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/philox_args.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct FactoryKernels {
  // out[i] = lo + (hi - lo) * u_i, u_i uniform in [0, 1). Dispatch dtype: out's (floating).
  Kernel<void(const Tensor& out, PhiloxArgs rng, double lo, double hi)> uniform;
  // out[i] = mean + std * n_i, n_i standard normal (Box-Muller). Dispatch dtype: out's (floating).
  Kernel<void(const Tensor& out, PhiloxArgs rng, double mean, double std)> normal;
  // out[i] = start + step * i, computed in double and converted once. Dispatch dtype: out's (numeric).
  Kernel<void(const Tensor& out, double start, double step)> arange;
  // out[i] = start + step * i for i < n/2 and end - step * (n - 1 - i) after (PyTorch's symmetric form, so both
  // endpoints are exact), step = (end - start) / (n - 1), in double with explicit fused multiply-adds (the same
  // bits on both backends), converted once. Dispatch dtype: out's (numeric).
  Kernel<void(const Tensor& out, double start, double end)> linspace;
  // out[i] = low + (r_i mod range), r_i 64 uniform bits: lanes 2(i%2), 2(i%2)+1 of counter offset + i/2
  // (kernels/common/philox.h, randint_at). range >= 1. Dispatch dtype: out's (numeric).
  Kernel<void(const Tensor& out, PhiloxArgs rng, int64_t low, uint64_t range)> randint;
};

template <>
struct Family<FactoryKernels> {
  static constexpr const char* name = "factory";
  static constexpr std::tuple kernels{Named{&FactoryKernels::uniform, "uniform"},
                                      Named{&FactoryKernels::normal, "normal"},
                                      Named{&FactoryKernels::arange, "arange"},
                                      Named{&FactoryKernels::linspace, "linspace"},
                                      Named{&FactoryKernels::randint, "randint"}};
};

}  // namespace volt::backend
