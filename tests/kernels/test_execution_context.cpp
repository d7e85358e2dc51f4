// The execution context a backend call hands its launchers (kernels/backend/execution_context.h) and the
// StreamScope that routes a region's kernels to another stream (kernels/stream_scope.h). The resolution and the
// publication run on the CPU; routing an op to a side stream needs a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/gradcheck.h"
#include <volt/config.h>
#include <volt/kernels/backend/execution_context.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/stream_scope.h>
#include <volt/runtime/cuda_api.h>
#if VOLT_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace volt;

namespace {

// Made-up stream handles: StreamOverride stores them without touching CUDA.
void* fake_handle(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i)); }

backend::ExecutionContext g_seen;
int g_calls = 0;

// A softmax kernel that records the context its call published, then writes zeros.
void record_context(const Tensor& out, const Tensor&, int64_t, int64_t, int64_t, bool) {
  g_seen = backend::current_context();
  ++g_calls;
  float* o = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 0.0f;
}

}  // namespace

TEST(ExecutionContext, TheCpuResolvesToNoStream) {
  const backend::ExecutionContext c = backend::resolve_context(kCPU);
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_EQ(c.stream, nullptr);
  EXPECT_FALSE(c.side_stream);
  EXPECT_TRUE(current_stream(kCPU).device.is_cpu());
  EXPECT_EQ(current_stream(kCPU).handle, nullptr);
}

TEST(ExecutionContext, OutsideACallThereIsNone) {
  try {
    backend::current_context();
    FAIL() << "current_context() outside backend::call did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside backend::call"), std::string::npos) << e.what();
  }
}

TEST(ExecutionContext, ACallPublishesItsContextToTheKernelAndWithdrawsIt) {
  backend::SoftmaxKernels patched = backend::family<backend::SoftmaxKernels>(*backend::table(DeviceType::CPU));
  patched.softmax_fwd.fn = record_context;
  backend::Backend b = *backend::table(DeviceType::CPU);
  std::get<const backend::SoftmaxKernels*>(b.tables) = &patched;
  g_seen = backend::ExecutionContext{cuda_device(3), fake_handle(9), true};
  g_calls = 0;
  {
    backend::ScopedBackendOverride o(DeviceType::CPU, &b);
    volt::testing::expect_close(softmax(ones({2, 3}), 1), std::vector<double>(6, 0.0));
  }
  ASSERT_EQ(g_calls, 1);
  EXPECT_TRUE(g_seen.device.is_cpu());
  EXPECT_EQ(g_seen.stream, nullptr);
  EXPECT_FALSE(g_seen.side_stream);
  EXPECT_THROW(backend::current_context(), Error);  // withdrawn when the call returned
}

TEST(ExecutionContext, CallsNestAndRestoreTheOuterContext) {
  backend::CallContext outer(kCPU);
  EXPECT_EQ(&backend::current_context(), &outer.context());
  {
    backend::CallContext inner(kCPU);
    EXPECT_EQ(&backend::current_context(), &inner.context());
  }
  EXPECT_EQ(&backend::current_context(), &outer.context());
}

TEST(ExecutionContext, OverridesResolvePerDeviceInnermostFirst) {
  const Device g0 = cuda_device(0), g1 = cuda_device(1);
  EXPECT_EQ(backend::StreamOverride::find(g0), nullptr);
  {
    backend::StreamOverride a(Stream{g0, fake_handle(1)});
    backend::StreamOverride b(Stream{g1, fake_handle(2)});
    ASSERT_NE(backend::StreamOverride::find(g0), nullptr);
    EXPECT_EQ(backend::StreamOverride::find(g0)->handle, fake_handle(1));
    EXPECT_EQ(backend::StreamOverride::find(g1)->handle, fake_handle(2));
    EXPECT_EQ(backend::StreamOverride::find(kCPU), nullptr);
    EXPECT_EQ(backend::StreamOverride::find(cuda_device(2)), nullptr);
    {
      backend::StreamOverride c(Stream{g0, fake_handle(3)});
      EXPECT_EQ(backend::StreamOverride::find(g0)->handle, fake_handle(3));  // the innermost wins
      EXPECT_EQ(backend::StreamOverride::find(g1)->handle, fake_handle(2));
    }
    EXPECT_EQ(backend::StreamOverride::find(g0)->handle, fake_handle(1));  // restored
    // Another thread has its own (empty) stack.
    const Stream* other = backend::StreamOverride::find(g0);  // this thread: a
    std::thread([&] { other = backend::StreamOverride::find(g0); }).join();
    EXPECT_EQ(other, nullptr);
  }
  EXPECT_EQ(backend::StreamOverride::find(g0), nullptr);
  EXPECT_EQ(backend::StreamOverride::find(g1), nullptr);
}

TEST(StreamScope, OverACpuStreamChangesNothing) {
  StreamScope s(get_stream(kCPU));
  EXPECT_TRUE(current_stream(kCPU).device.is_cpu());
  EXPECT_EQ(backend::StreamOverride::find(kCPU), nullptr);
  volt::testing::expect_close(mul(ones({3}), 2.0), {2, 2, 2});
}

TEST(StreamScope, AnUnusableGpuIsRefusedByName) {
  if (cuda_available() && cuda_device_count() > 7) GTEST_SKIP() << "cuda:7 exists here";
  try {
    StreamScope s(Stream{cuda_device(7), fake_handle(1)});
    FAIL() << "a StreamScope over a stream of cuda:7 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("StreamScope"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:7"), std::string::npos) << m;
  }
  EXPECT_EQ(backend::StreamOverride::find(cuda_device(7)), nullptr);  // nothing was pushed
}

// An op inside a scope runs on the scope's stream: with that stream held by a host function, the op's result is
// not there yet (read through a third stream) while the compute stream is free of it; released, the result is
// right, and ops after it inside the scope (a zeros()-based reduction, a copy to the host) see it.
TEST(StreamScope, RoutesAnOpsKernelsToTheScopesStream) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
#if VOLT_WITH_CUDA
  const Device dev = cuda_device(0);
  DeviceScope current(dev);
  Tensor x = ones({4096}, DType::f32, dev);
  synchronize(dev);
  cudaStream_t side = nullptr, reader = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
  std::atomic<bool> release{false};
  auto hold = [](void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
  };
  ASSERT_EQ(cudaLaunchHostFunc(side, hold, &release), cudaSuccess);
  struct Release {  // never leave the side stream (and the compute stream behind it) held, even on a failure
    std::atomic<bool>& flag;
    ~Release() { flag = true; }
  } guard{release};
  std::vector<float> seen(4096, -1.0f);
  {
    StreamScope scope(Stream{dev, side});
    EXPECT_EQ(current_stream(dev).handle, static_cast<void*>(side));
    mul_(x, 3.0);  // queued behind the held host function
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long enough for a kernel on a free stream
    EXPECT_EQ(cudaStreamQuery(side), cudaErrorNotReady);
    ASSERT_EQ(cudaMemcpyAsync(seen.data(), x.data_ptr(), x.nbytes(), cudaMemcpyDeviceToHost, reader), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
    EXPECT_EQ(seen[0], 1.0f);  // not multiplied yet: the kernel waits on the side stream
    EXPECT_EQ(seen[4095], 1.0f);
    release = true;
    Tensor total = sum(x);             // a reduction in the scope, ordered after mul_
    EXPECT_EQ(total.item(), 3.0 * 4096);  // item(): a copy on the compute stream, ordered after the side stream
  }
  EXPECT_EQ(current_stream(dev).handle, get_stream(dev, StreamKind::Compute).handle);  // the scope is gone
  volt::testing::expect_close(x.cpu(), std::vector<double>(4096, 3.0));
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  cudaStreamDestroy(side);
  cudaStreamDestroy(reader);
#endif
}
