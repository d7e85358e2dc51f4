// The one place that knows which backends exist: a constant Backend per device type made of the tables
// kernels/cpu and kernels/cuda define (constant-initialised, so nothing depends on static initialisers), the test
// override, the missing-kernel error and the public query of kernels/kernel_support.h.
#include <volt/kernels/backend/registry.h>

#include <atomic>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/recording.h>
#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/backend/tensor_ops.h>
#include <volt/kernels/kernel_support.h>
#include <volt/runtime/error.h>

namespace volt::backend {

namespace {

constexpr Backend kCpu{"cpu", FamilyTables{&cpu::elementwise_kernels, &cpu::factory_kernels, &cpu::reduce_kernels,
                                           &cpu::softmax_kernels, &cpu::loss_kernels, &cpu::dropout_kernels,
                                           &cpu::index_kernels, &cpu::attention_kernels, &cpu::norm_kernels,
                                           &cpu::batch_norm_kernels, &cpu::optim_kernels, &cpu::linalg_kernels,
                                           &cpu::conv_kernels, &cpu::pool_kernels,
                                           &cpu::tensor_op_kernels}};
#if VOLT_WITH_CUDA
constexpr Backend kCuda{"cuda", FamilyTables{&cuda::elementwise_kernels, &cuda::factory_kernels,
                                             &cuda::reduce_kernels, &cuda::softmax_kernels, &cuda::loss_kernels,
                                             &cuda::dropout_kernels, &cuda::index_kernels, &cuda::attention_kernels,
                                             &cuda::norm_kernels, &cuda::batch_norm_kernels, &cuda::optim_kernels,
                                             &cuda::linalg_kernels, &cuda::conv_kernels, &cuda::pool_kernels,
                                             &cuda::tensor_op_kernels}};
#endif

constexpr int kDeviceTypes = 2;
constinit std::atomic<const Backend*> g_override[kDeviceTypes] = {};

int slot(DeviceType type) { return static_cast<int>(type); }

// Calls fn(std::type_identity<F>{}) for every family F.
template <class Fn>
void for_each_family(Fn&& fn) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (fn(std::type_identity<std::remove_cvref_t<std::remove_pointer_t<std::tuple_element_t<I, FamilyTables>>>>{}),
     ...);
  }(std::make_index_sequence<std::tuple_size_v<FamilyTables>>{});
}

// Every member of a family is listed in its Family<>::kernels (all Kernel<> have one size).
template <class F>
constexpr bool lists_every_member() {
  return sizeof(F) == std::tuple_size_v<std::remove_cvref_t<decltype(Family<F>::kernels)>> * sizeof(Kernel<void()>);
}
static_assert(lists_every_member<ElementwiseKernels>() && lists_every_member<FactoryKernels>() &&
              lists_every_member<ReduceKernels>() && lists_every_member<SoftmaxKernels>() &&
              lists_every_member<LossKernels>() && lists_every_member<DropoutKernels>() &&
              lists_every_member<IndexKernels>() && lists_every_member<AttentionKernels>() &&
              lists_every_member<NormKernels>() && lists_every_member<BatchNormKernels>() &&
              lists_every_member<OptimKernels>() && lists_every_member<LinalgKernels>() &&
              lists_every_member<ConvKernels>() && lists_every_member<PoolKernels>() &&
              lists_every_member<TensorOpKernels>(),
              "a Family<>::kernels list misses a member of its struct");

}  // namespace

namespace detail {
const Backend& cpu_backend() { return kCpu; }
}  // namespace detail

const Backend* table(DeviceType type) {
  if (const Backend* o = g_override[slot(type)].load(std::memory_order_acquire)) return o;
  if (type == DeviceType::CPU) {
    if (const Backend* r = detail::cpu_recording_backend()) return r;  // a Graph captures this thread's CPU work
    return &kCpu;
  }
#if VOLT_WITH_CUDA
  return &kCuda;
#else
  return nullptr;
#endif
}

ScopedBackendOverride::ScopedBackendOverride(DeviceType type, const Backend* replacement)
    : type_(type), previous_(g_override[slot(type)].exchange(replacement, std::memory_order_acq_rel)) {}

ScopedBackendOverride::~ScopedBackendOverride() { g_override[slot(type_)].store(previous_, std::memory_order_release); }

std::string DTypeSet::str() const {
  std::string s;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::u8, DType::i8,
                  DType::boolean})
    if (contains(d)) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s.empty() ? "none" : s;
}

namespace detail {
void missing_kernel(const char* kernel, const char* family, Device device, DType dtype, const Backend* b, bool has_fn,
                    DTypeSet dtypes) {
  if (b == nullptr)
    VOLT_FAIL("kernel ", kernel, " (", family, "): no backend for device ", device.str(), " (dtype ",
              dtype_name(dtype), "): a CUDA tensor reached an op but Volt was built without the CUDA backend");
  if (!has_fn)
    VOLT_FAIL("kernel ", kernel, " (", family, ") is not implemented by the ", b->name, " backend (device ",
              device.str(), ", dtype ", dtype_name(dtype), ")");
  VOLT_FAIL("kernel ", kernel, " (", family, ") on ", device.str(), " does not support dtype ", dtype_name(dtype),
            "; the ", b->name, " backend implements it for ", dtypes.str());
}
}  // namespace detail

}  // namespace volt::backend

namespace volt {

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  backend::for_each_family([&]<class F>(std::type_identity<F>) {
    std::apply([&](const auto&... named) { (names.emplace_back(named.name), ...); }, backend::Family<F>::kernels);
  });
  return names;
}

bool kernel_supported(std::string_view kernel, Device device, DType dtype) {
  const backend::Backend* b = backend::table(device.type);
  const bool device_present = device.is_cpu() || (device.index >= 0 && device.index < cuda_device_count());
  bool known = false, supported = false;
  backend::for_each_family([&]<class F>(std::type_identity<F>) {
    std::apply(
        [&](const auto&... named) {
          (
              [&] {
                if (known || kernel != named.name) return;
                known = true;
                if (b == nullptr || !device_present) return;
                const auto& k = backend::family<F>(*b).*(named.member);
                supported = k.fn != nullptr && k.dtypes.contains(dtype);
              }(),
              ...);
        },
        backend::Family<F>::kernels);
  });
  if (!known) {
    std::string all;
    for (const std::string& n : kernel_names()) all += (all.empty() ? "" : ", ") + n;
    VOLT_FAIL("kernel_supported: unknown kernel '", kernel, "'; the kernels are: ", all);
  }
  return supported;
}

}  // namespace volt
