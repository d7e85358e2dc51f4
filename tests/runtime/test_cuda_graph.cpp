// CUDA graph capture primitives (runtime/cuda_graph.h): without a GPU every capture call fails clearly; on a GPU
// a captured memset and copies replay with refreshed inputs, and the graph's private pool keeps its blocks from
// eager allocations made after the capture.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_graph.h>
#include <volt/runtime/error.h>

using namespace volt;

TEST(CudaGraph, WithoutAGpuCaptureFailsClearly) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible";
  try {
    cuda_graph::begin_capture(cuda_device(0));
    FAIL() << "expected volt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda_graph::begin_capture"), std::string::npos) << m;
  }
  EXPECT_THROW(cuda_graph::copy_to_device_async(nullptr, nullptr, 4, cuda_device(0)), Error);
  // Cleanup never throws.
  cuda_graph::abort_capture(cuda_device(0), 1);
  cuda_graph::release_pool(cuda_device(0), 1);
}

TEST(CudaGraph, CapturedCopiesReplayAndThePoolStaysApart) {
  if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status();
  const Device dev = cuda_device(0);
  const Stream compute = get_stream(dev, StreamKind::Compute);
  constexpr size_t n = 4096, bytes = n * sizeof(float);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  std::shared_ptr<void> src = allocate(dev, bytes);  // the graph's input, refreshed before each launch
  cuda_graph::copy_to_device_async(src.get(), host.data(), bytes, dev);
  std::shared_ptr<void> dying = allocate(dev, bytes);  // a general block freed during the capture
  void* const dying_ptr = dying.get();
  synchronize(dev);

  const uint64_t pool = cuda_graph::begin_capture(dev);
  std::shared_ptr<void> tmp, out;
  try {
    EXPECT_TRUE(cuda_graph::is_capturing(dev));
    tmp = allocate(dev, bytes);  // fresh blocks of the private pool
    out = allocate(dev, 2 * bytes);
    EXPECT_NE(tmp.get(), dying_ptr);
    memset_zero(out.get(), dev, 2 * bytes);
    copy_bytes(tmp.get(), dev, src.get(), dev, bytes, &compute);
    copy_bytes(out.get(), dev, tmp.get(), dev, bytes, &compute);  // out = [src, zeros]
    dying.reset();  // adopted by the pool
    // A host synchronisation is refused before it reaches CUDA, so the capture stays valid.
    EXPECT_THROW(synchronize(dev), Error);
    std::vector<float> probe(n);
    EXPECT_THROW(copy_bytes(probe.data(), kCPU, out.get(), dev, bytes), Error);
  } catch (...) {
    cuda_graph::abort_capture(dev, pool);
    throw;
  }
  std::shared_ptr<cuda_graph::Exec> exec = cuda_graph::end_capture(dev, pool);
  EXPECT_FALSE(cuda_graph::is_capturing(dev));
  EXPECT_EQ(cuda_graph::num_nodes(*exec), 3u);  // the memset and two copies

  // Blocks of the pool (freed after the capture, or adopted during it) never serve eager allocations.
  void* const tmp_ptr = tmp.get();
  tmp.reset();
  std::shared_ptr<void> eager = allocate(dev, bytes);
  std::shared_ptr<void> eager2 = allocate(dev, bytes);
  for (void* p : {eager.get(), eager2.get()}) {
    EXPECT_NE(p, tmp_ptr);
    EXPECT_NE(p, dying_ptr);
    EXPECT_NE(p, out.get());
  }
  const std::vector<float> marker(n, -1.0f);
  copy_bytes(eager.get(), dev, marker.data(), kCPU, bytes);

  for (int replay = 0; replay < 3; ++replay) {
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(replay * 10000 + static_cast<int>(i));
    cuda_graph::copy_to_device_async(src.get(), host.data(), bytes, dev);
    std::fill(host.begin(), host.end(), 0.0f);  // the staging copy was taken: the buffer may be reused at once
    cuda_graph::launch(*exec, dev);
    std::vector<float> got(2 * n);
    copy_bytes(got.data(), kCPU, out.get(), dev, 2 * bytes);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], static_cast<float>(replay * 10000 + static_cast<int>(i))) << "replay " << replay << " i " << i;
      ASSERT_EQ(got[n + i], 0.0f) << "replay " << replay << " i " << i;
    }
  }
  std::vector<float> kept(n);
  copy_bytes(kept.data(), kCPU, eager.get(), dev, bytes);
  EXPECT_EQ(kept, marker);  // the replays wrote only the pool's blocks

  exec.reset();
  out.reset();
  cuda_graph::release_pool(dev, pool);
  // Released, the pool's blocks serve eager allocations again.
  const int64_t system_allocs = memory_stats(dev).num_system_allocs;
  std::shared_ptr<void> again = allocate(dev, bytes);
  EXPECT_EQ(memory_stats(dev).num_system_allocs, system_allocs);
}

TEST(CudaGraph, AbortLeavesCaptureModeAndReleasesThePool) {
  if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status();
  const Device dev = cuda_device(0);
  const uint64_t pool = cuda_graph::begin_capture(dev);
  EXPECT_THROW(cuda_graph::begin_capture(dev), Error);  // one capture per device
  constexpr size_t odd = (size_t{3} << 20) + 3584;  // a size no other test caches
  std::shared_ptr<void> p = allocate(dev, odd);
  memset_zero(p.get(), dev, odd);
  cuda_graph::abort_capture(dev, pool);
  EXPECT_FALSE(cuda_graph::is_capturing(dev));
  EXPECT_THROW(cuda_graph::end_capture(dev, pool), Error);  // nothing open any more
  void* const q = p.get();
  p.reset();  // the pool is gone: the block joins the general pool
  std::shared_ptr<void> r = allocate(dev, odd);
  EXPECT_EQ(r.get(), q);
  synchronize(dev);  // the device is usable after the abort
}
