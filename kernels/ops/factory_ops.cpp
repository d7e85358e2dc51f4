#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/philox_draw.h>
#include <volt/runtime/cuda_api.h>
#include <cmath>

namespace volt {

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }
Tensor zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  // A CPU capture records kernels only (a memset now would not be replayed); a CUDA capture records the memset.
  if (device.is_cpu() && Graph::capturing(device) != nullptr) t.fill_(0.0);
  else memset_zero(t.data_ptr(), device, t.nbytes());
  return t;
}
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  VOLT_CHECK(step != 0, "arange: step must be nonzero");
  VOLT_CHECK(dtype != DType::boolean, "arange: bool is not a valid dtype for a range");
  double n = std::ceil((end - start) / step);
  int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor t = empty({count}, dtype, device);
  backend::call<&backend::FactoryKernels::arange>(device, t.dtype(), t, start, step);
  return t;
}
Tensor arange(int64_t end, DType dtype, Device device) { return arange(0.0, static_cast<double>(end), 1.0, dtype, device); }

// Counters: each rand element uses a quarter of a 128-bit counter, each randn element half of one.
static uint64_t counters_for(int64_t n, int per_counter) { return static_cast<uint64_t>((n + per_counter - 1) / per_counter); }

Tensor rand_with_seed(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype, Device device) {
  VOLT_CHECK(is_floating(dtype), "rand: dtype must be floating point, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype, device);
  backend::call<&backend::FactoryKernels::uniform>(device, t.dtype(), t, PhiloxArgs{seed, offset}, 0.0, 1.0);
  return t;
}

Tensor randn_with_seed(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype, Device device) {
  VOLT_CHECK(is_floating(dtype), "randn: dtype must be floating point, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype, device);
  backend::call<&backend::FactoryKernels::normal>(device, t.dtype(), t, PhiloxArgs{seed, offset}, 0.0, 1.0);
  return t;
}

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen, double lo, double hi) {
  VOLT_CHECK(is_floating(dtype), "rand: dtype must be floating point, got ", dtype_name(dtype));
  VOLT_CHECK(lo <= hi, "rand: lo (", lo, ") must not exceed hi (", hi, ")");
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype, device);
  backend::call<&backend::FactoryKernels::uniform>(device, t.dtype(), t, philox_draw(g, device, counters_for(t.numel(), 4)),
                                                   lo, hi);
  return t;
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen, double mean, double std) {
  VOLT_CHECK(is_floating(dtype), "randn: dtype must be floating point, got ", dtype_name(dtype));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype, device);
  backend::call<&backend::FactoryKernels::normal>(device, t.dtype(), t, philox_draw(g, device, counters_for(t.numel(), 2)),
                                                  mean, std);
  return t;
}

}  // namespace volt
