// CPU fills of the factory ops: Philox random numbers (kernels/common/philox.h, philox_int.h), arange and
// linspace.
#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/philox.h>
#include <volt/kernels/common/philox_int.h>

namespace volt::cpu {

namespace {

// Random fills write contiguous `out`; element i depends only on (seed, offset, i).
void uniform(const Tensor& out, PhiloxArgs rng, double lo, double hi) {
  const uint64_t seed = rng.key(), offset = rng.first();
  const int64_t n = out.numel();
  dispatch_floating(out.dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(philox::mad(A(hi - lo), A(philox::uniform_at(seed, offset, static_cast<uint64_t>(i))), A(lo)));
  });
}

void normal(const Tensor& out, PhiloxArgs rng, double mean, double std) {
  const uint64_t seed = rng.key(), offset = rng.first();
  const int64_t n = out.numel();
  dispatch_floating(out.dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(philox::mad(A(std), A(philox::normal_at(seed, offset, static_cast<uint64_t>(i))), A(mean)));
  });
}

void arange(const Tensor& out, double start, double step) {
  const int64_t n = out.numel();
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) o[i] = T(static_cast<acc_t<T>>(start + step * static_cast<double>(i)));
  });
}

void linspace(const Tensor& out, double start, double end) {
  const int64_t n = out.numel();
  dispatch_numeric(out.dtype(), "linspace", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    if (n == 1) o[0] = T(static_cast<acc_t<T>>(start));
    else
      for (int64_t i = 0; i < n; ++i) o[i] = T(static_cast<acc_t<T>>(linspace_at(start, end, n, i)));
  });
}

void randint(const Tensor& out, PhiloxArgs rng, int64_t low, uint64_t range) {
  const uint64_t seed = rng.key(), offset = rng.first();
  const int64_t n = out.numel();
  dispatch_numeric(out.dtype(), "randint", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(static_cast<acc_t<T>>(philox::randint_at(seed, offset, static_cast<uint64_t>(i), low, range)));
  });
}

}  // namespace

constexpr backend::FactoryKernels factory_kernels{
    .uniform = {uniform, backend::kFloating},
    .normal = {normal, backend::kFloating},
    .arange = {arange, backend::kNumeric},
    .linspace = {linspace, backend::kNumeric},
    .randint = {randint, backend::kNumeric},
};

}  // namespace volt::cpu
