// The backend interface (kernels/backend/): the public kernel_supported()/kernel_names() query, the internal
// backend::supported<K>(), and the error an op gives when its device's backend lacks a kernel, checked through
// ScopedBackendOverride (a backend table with one kernel removed or replaced).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include <volt/config.h>
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/kernel_support.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/trace.h>

using namespace volt;

namespace {

const std::vector<DType> kEveryDType = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                        DType::i64, DType::i32, DType::u8,   DType::boolean};

// The CPU backend with its softmax table replaced by `softmax`.
backend::Backend cpu_with(const backend::SoftmaxKernels& softmax) {
  backend::Backend b = *backend::table(DeviceType::CPU);
  std::get<const backend::SoftmaxKernels*>(b.tables) = &softmax;
  return b;
}

// Writes 7 everywhere: proves a call went through the overriding table.
void fill_seven(const Tensor& out, const Tensor&, int64_t, int64_t, int64_t, bool) {
  float* o = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 7.0f;
}

// Kernel-layer ranges seen: (name, device).
struct KernelRanges : trace::Recorder {
  std::vector<std::pair<std::string, std::string>> seen;
  int open = 0;
  void begin(trace::Layer layer, std::string_view name, const trace::RangeInfo& info) override {
    if (layer == trace::Layer::kernel) seen.emplace_back(std::string(name), info.device.str());
    ++open;
  }
  void end(trace::Layer) override { --open; }
};

// Records the dtype of the x it was given (and computes nothing).
DType g_conv_dtype = DType::boolean;
void record_conv(const Tensor&, const Tensor& x, const Tensor&, const Tensor&, const Conv2dParams&) {
  g_conv_dtype = x.dtype();
}

}  // namespace

TEST(KernelSupport, CpuKernelsReportTheirDTypes) {
  EXPECT_TRUE(kernel_supported("gemm", kCPU, DType::f32));
  EXPECT_TRUE(kernel_supported("gemm", kCPU, DType::f64));
  EXPECT_FALSE(kernel_supported("gemm", kCPU, DType::f16));  // matmul computes f16 through f32 on the CPU
  EXPECT_FALSE(kernel_supported("gemm", kCPU, DType::i64));
  for (DType d : kEveryDType) {
    EXPECT_TRUE(kernel_supported("unary", kCPU, d)) << dtype_name(d);
    EXPECT_TRUE(kernel_supported("cast", kCPU, d)) << dtype_name(d);
    EXPECT_EQ(kernel_supported("binary", kCPU, d), d != DType::boolean) << dtype_name(d);
    EXPECT_EQ(kernel_supported("softmax_fwd", kCPU, d), is_floating(d)) << dtype_name(d);
    EXPECT_EQ(kernel_supported("dropout_fwd", kCPU, d), is_floating(d)) << dtype_name(d);
    EXPECT_EQ(kernel_supported("one_hot", kCPU, d), d == DType::i64) << dtype_name(d);
    EXPECT_EQ(kernel_supported("index_add", kCPU, d), d == DType::f32 || d == DType::f64) << dtype_name(d);
    EXPECT_EQ(kernel_supported("conv2d_forward", kCPU, d), d == DType::f32 || d == DType::f64) << dtype_name(d);
  }
  // The CPU backend is complete: every kernel runs there for some dtype, except cuDNN's fused attention (the CPU
  // runs the fused softmax that is its fallback everywhere).
  for (const std::string& name : kernel_names()) {
    if (name == "flash_attn_fwd" || name == "flash_attn_bwd") continue;
    const bool any = std::any_of(kEveryDType.begin(), kEveryDType.end(),
                                 [&](DType d) { return kernel_supported(name, kCPU, d); });
    EXPECT_TRUE(any) << name;
  }
}

TEST(KernelSupport, AnOpFallsBackWhereTheKernelIsMissing) {
  // No f16 convolution kernel on the CPU, yet conv2d runs in f16 there (through f32), as documented.
  ASSERT_FALSE(kernel_supported("conv2d_forward", kCPU, DType::f16));
  Tensor x = ones({1, 1, 3, 3}, DType::f16), w = ones({1, 1, 2, 2}, DType::f16);
  Tensor y = conv2d(x, w);
  EXPECT_EQ(y.dtype(), DType::f16);
  volt::testing::expect_close(y.to(DType::f32), {4, 4, 4, 4});
}

TEST(KernelSupport, NamesEveryKernelOnce) {
  const std::vector<std::string> names = kernel_names();
  EXPECT_EQ(names.size(), 59u);  // 45 + rmsprop/adagrad/lion steps + linspace, randint + 5 scan/sort/flip kernels
                                 // + cumsum, cumprod, cumprod_backward, sort, flip (kernels/tensor_ops.h)
                                 // + flash_attn_fwd, flash_attn_bwd (CUDA only) + matmul_act_bwd + gemm_bgrad
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  for (const char* n : {"unary", "cast", "uniform", "sum_rows", "arg_reduce", "softmax_fwd", "class_loss_fwd",
                        "dropout_bwd", "gather", "attn_softmax_bwd", "norm_fwd", "batch_norm_backward", "adam_step", "rmsprop_step", "adagrad_step", "lion_step", "norm_partial",
                        "scale_by", "residual_norm_fwd", "residual_norm_bwd", "classifier_fwd",
                        "gemm", "linear_act_fwd", "bias_act_bwd", "matmul_act_bwd", "conv2d_backward", "avg_pool2d_forward", "cumsum",
                        "sort", "flip"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(names.front(), "unary");  // grouped by family, in declaration order
}

TEST(KernelSupport, UnknownKernelNameIsAnError) {
  VOLT_EXPECT_ERROR(kernel_supported("softmax_forward", kCPU, DType::f32), "unknown kernel 'softmax_forward'",
                    "softmax_fwd", "gemm");
  VOLT_EXPECT_ERROR(kernel_supported("", kCPU, DType::f32), "unknown kernel ''");
}

TEST(KernelSupport, CudaDevicesThatAreNotThereSupportNothing) {
  const Device past_last = cuda_device(cuda_device_count());
  for (const std::string& name : kernel_names()) EXPECT_FALSE(kernel_supported(name, past_last, DType::f32)) << name;
  if (!cuda_available()) {
    for (const std::string& name : kernel_names())
      EXPECT_FALSE(kernel_supported(name, cuda_device(0), DType::f32)) << name;
  } else {
    EXPECT_TRUE(kernel_supported("gemm", cuda_device(0), DType::f16));  // cuBLAS takes half types
    EXPECT_TRUE(kernel_supported("conv2d_forward", cuda_device(0), DType::bf16));
    EXPECT_FALSE(kernel_supported("index_add", cuda_device(0), DType::f16));
  }
#if !VOLT_WITH_CUDA
  EXPECT_EQ(backend::table(DeviceType::CUDA), nullptr);
#else
  ASSERT_NE(backend::table(DeviceType::CUDA), nullptr);
  EXPECT_STREQ(backend::table(DeviceType::CUDA)->name, "cuda");
#endif
}

TEST(Backend, SupportedAsksTheDevicesTable) {
  EXPECT_TRUE((backend::supported<&backend::SoftmaxKernels::softmax_fwd>(kCPU, DType::bf16)));
  EXPECT_FALSE((backend::supported<&backend::SoftmaxKernels::softmax_fwd>(kCPU, DType::i32)));
  EXPECT_TRUE((backend::supported<&backend::LinalgKernels::gemm>(kCPU, DType::f64)));
  EXPECT_FALSE((backend::supported<&backend::LinalgKernels::gemm>(kCPU, DType::bf16)));
  EXPECT_EQ((backend::supported<&backend::LinalgKernels::gemm>(cuda_device(0), DType::f32)), VOLT_WITH_CUDA != 0);
  EXPECT_TRUE((backend::half_through_f32<&backend::LinalgKernels::gemm>(kCPU, DType::f16)));
  EXPECT_FALSE((backend::half_through_f32<&backend::LinalgKernels::gemm>(kCPU, DType::f32)));
  EXPECT_FALSE((backend::half_through_f32<&backend::SoftmaxKernels::softmax_fwd>(kCPU, DType::bf16)));
  EXPECT_STREQ(backend::kernel_name<&backend::SoftmaxKernels::softmax_fwd>(), "softmax_fwd");
  EXPECT_STREQ(backend::kernel_name<&backend::ElementwiseKernels::where>(), "where");
}

TEST(Backend, OpsCallThroughTheDevicesTable) {
  backend::SoftmaxKernels patched = backend::family<backend::SoftmaxKernels>(*backend::table(DeviceType::CPU));
  patched.softmax_fwd.fn = fill_seven;
  const backend::Backend b = cpu_with(patched);
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}).reshape({2, 2});
  {
    backend::ScopedBackendOverride o(DeviceType::CPU, &b);
    volt::testing::expect_close(softmax(x, 1), {7, 7, 7, 7});
  }
  const double e = 1.0 / (1.0 + std::exp(1.0));
  volt::testing::expect_close(softmax(x, 1), {e, 1 - e, e, 1 - e});  // the real table again
}

TEST(Backend, EachCallIsAKernelRangeNamedAfterTheKernel) {
  KernelRanges r;
  trace::set_recorder(&r, trace::layer_mask({trace::Layer::kernel}));
  Tensor y = softmax(ones({2, 3}), 1);
  Tensor z = matmul(ones({2, 3}), ones({3, 2}));
  trace::set_recorder(nullptr);
  EXPECT_EQ(r.open, 0);
  const std::vector<std::pair<std::string, std::string>> want = {{"softmax_fwd", "cpu"}, {"gemm", "cpu"}};
  for (const auto& w : want) EXPECT_NE(std::find(r.seen.begin(), r.seen.end(), w), r.seen.end()) << w.first;
  // A kernel that is missing still opens (and closes) its range before the error.
  backend::SoftmaxKernels none;
  const backend::Backend b = cpu_with(none);
  backend::ScopedBackendOverride o(DeviceType::CPU, &b);
  Tensor x = ones({2});
  r.seen.clear();
  trace::set_recorder(&r, trace::layer_mask({trace::Layer::kernel}));
  EXPECT_THROW(softmax(x, 0), Error);
  trace::set_recorder(nullptr);
  EXPECT_EQ(r.open, 0);
  ASSERT_EQ(r.seen.size(), 1u);
  EXPECT_EQ(r.seen[0].first, "softmax_fwd");
}

TEST(Backend, TheHalfFallbackFollowsTheTable) {
  Tensor x = ones({1, 1, 3, 3}, DType::f16), w = ones({1, 1, 2, 2}, DType::f16);
  backend::ConvKernels conv = backend::family<backend::ConvKernels>(*backend::table(DeviceType::CPU));
  conv.conv2d_forward.fn = record_conv;
  backend::Backend b = *backend::table(DeviceType::CPU);
  std::get<const backend::ConvKernels*>(b.tables) = &conv;
  backend::ScopedBackendOverride o(DeviceType::CPU, &b);
  g_conv_dtype = DType::boolean;
  conv2d(x, w);  // no f16 kernel: the op runs the f32 one
  EXPECT_EQ(g_conv_dtype, DType::f32);
  conv.conv2d_forward.dtypes = {DType::f32, DType::f64, DType::f16};
  g_conv_dtype = DType::boolean;
  conv2d(x, w);  // a table with an f16 kernel gets f16
  EXPECT_EQ(g_conv_dtype, DType::f16);
}

TEST(Backend, AMissingKernelIsAnErrorNamingKernelDeviceAndDType) {
  backend::SoftmaxKernels none;  // no kernels at all
  const backend::Backend b = cpu_with(none);
  Tensor x = ones({2, 3});
  {
    backend::ScopedBackendOverride o(DeviceType::CPU, &b);
    VOLT_EXPECT_ERROR(softmax(x, 1), "kernel softmax_fwd (softmax)", "not implemented by the cpu backend",
                      "device cpu", "float32");
    VOLT_EXPECT_ERROR(log_softmax(x, 0), "softmax_fwd", "cpu");
    EXPECT_FALSE(kernel_supported("softmax_fwd", kCPU, DType::f32));
    EXPECT_TRUE(kernel_supported("gemm", kCPU, DType::f32));  // the other families are untouched
    volt::testing::expect_close(matmul(ones({1, 2}), ones({2, 1})), {2});
  }
  EXPECT_TRUE(kernel_supported("softmax_fwd", kCPU, DType::f32));
  volt::testing::expect_close(softmax(x, 1), {1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(Backend, AKernelWithoutTheDTypeIsAnErrorListingTheOnesItTakes) {
  backend::SoftmaxKernels f64_only = backend::family<backend::SoftmaxKernels>(*backend::table(DeviceType::CPU));
  f64_only.softmax_fwd.dtypes = {DType::f64};
  const backend::Backend b = cpu_with(f64_only);
  backend::ScopedBackendOverride o(DeviceType::CPU, &b);
  VOLT_EXPECT_ERROR(softmax(ones({2, 2}), 1), "kernel softmax_fwd (softmax) on cpu does not support dtype float32",
                    "implements it for float64");
  volt::testing::expect_close(softmax(ones({1, 2}, DType::f64), 1), {0.5, 0.5});
  EXPECT_TRUE(kernel_supported("softmax_fwd", kCPU, DType::f64));
  EXPECT_FALSE(kernel_supported("softmax_fwd", kCPU, DType::f32));
}

TEST(Backend, ADeviceTypeWithoutABackendOrKernelIsAnError) {
  Tensor t = ones({2});
#if !VOLT_WITH_CUDA
  // A CPU-only build has no CUDA table: the call fails before touching any device.
  VOLT_EXPECT_ERROR((backend::call<&backend::ElementwiseKernels::cast>(cuda_device(0), DType::f32, t, t)),
                    "kernel cast (elementwise)", "no backend for device cuda:0", "float32",
                    "built without the CUDA backend");
#endif
  // A CUDA backend lacking the kernel: the error comes before the device is made current (none is needed here).
  backend::ElementwiseKernels no_cast = backend::family<backend::ElementwiseKernels>(*backend::table(DeviceType::CPU));
  no_cast.cast = {};
  backend::Backend fake_cuda = *backend::table(DeviceType::CPU);
  fake_cuda.name = "cuda";
  std::get<const backend::ElementwiseKernels*>(fake_cuda.tables) = &no_cast;
  backend::ScopedBackendOverride o(DeviceType::CUDA, &fake_cuda);
  VOLT_EXPECT_ERROR((backend::call<&backend::ElementwiseKernels::cast>(cuda_device(1), DType::bf16, t, t)),
                    "kernel cast (elementwise) is not implemented by the cuda backend", "device cuda:1", "bfloat16");
}
