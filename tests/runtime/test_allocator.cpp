// CachingAllocator bookkeeping over a fake raw allocator, and the CPU allocator's statistics and alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <set>

#include <volt/kernels/ops.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;

namespace {

// Records every raw call; hands out distinct fake addresses (never dereferenced).
struct FakeRaw {
  std::set<uintptr_t> live;
  int allocs = 0, frees = 0;
  uintptr_t next = 0x10000;
  bool fail = false;
  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) -> void* {
          if (fail) return nullptr;
          ++allocs;
          uintptr_t p = next;
          next += (n + 4095) / 4096 * 4096 + 4096;
          live.insert(p);
          return reinterpret_cast<void*>(p);
        },
        [this](void* p) {
          ++frees;
          EXPECT_EQ(live.erase(reinterpret_cast<uintptr_t>(p)), 1u) << "raw free of an unknown block";
        });
  }
};

}  // namespace

TEST(CachingAllocator, RoundsSizesTo512) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
}

TEST(CachingAllocator, StatisticsReuseAndEmptyCache) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    EXPECT_EQ(a.allocate(0), nullptr);
    void* p = a.allocate(1000);  // 1024 bytes
    void* q = a.allocate(3000);  // 3072 bytes
    MemoryStats s = a.stats();
    EXPECT_EQ(s.allocated, 4096);
    EXPECT_EQ(s.reserved, 4096);
    EXPECT_EQ(s.peak_allocated, 4096);
    EXPECT_EQ(s.num_allocs, 2);
    EXPECT_EQ(s.num_system_allocs, 2);

    a.free(p);
    s = a.stats();
    EXPECT_EQ(s.allocated, 3072);
    EXPECT_EQ(s.reserved, 4096);  // the block stays cached
    EXPECT_EQ(s.peak_allocated, 4096);

    // Same size class: the cached block comes back, no system call.
    void* p2 = a.allocate(900);
    EXPECT_EQ(p2, p);
    s = a.stats();
    EXPECT_EQ(s.num_system_allocs, 2);
    EXPECT_EQ(s.num_allocs, 3);
    EXPECT_EQ(raw.allocs, 2);

    // A freed 3072-byte block serves a 2048-byte request (within 2x) but not a 1024-byte one (would strand).
    a.free(q);
    void* r = a.allocate(2000);
    EXPECT_EQ(r, q);
    a.free(r);
    void* small = a.allocate(100);
    EXPECT_NE(small, q);
    EXPECT_EQ(a.stats().num_system_allocs, 3);

    a.reset_peak();
    EXPECT_EQ(a.stats().peak_allocated, a.stats().allocated);
    EXPECT_EQ(a.stats().allocated, 1024 + 512);

    a.empty_cache();  // returns the cached 3072 block only
    s = a.stats();
    EXPECT_EQ(raw.frees, 1);
    EXPECT_EQ(s.reserved, 1024 + 512);
    EXPECT_EQ(s.allocated, 1024 + 512);
    a.free(p2);
    a.free(small);
    EXPECT_EQ(a.stats().allocated, 0);
    EXPECT_EQ(a.stats().reserved, 1024 + 512);
  }
  // Destruction returns the remaining cached blocks.
  EXPECT_TRUE(raw.live.empty());
  EXPECT_EQ(raw.frees, 3);
}

TEST(CachingAllocator, OutOfMemoryDropsCacheThenReportsClearly) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  void* p = a.allocate(512);
  a.free(p);
  raw.fail = true;
  try {
    a.allocate(1 << 20);
    FAIL() << "expected volt::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("1048576"), std::string::npos) << m;
  }
  EXPECT_EQ(raw.frees, 1);  // the cache was emptied before giving up
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(CpuAllocator, StatsFollowTensorLifetimes) {
  MemoryStats before = memory_stats(kCPU);
  int64_t peak_target;
  {
    Tensor t = empty({1000}, DType::f64);  // 8000 bytes
    MemoryStats during = memory_stats(kCPU);
    EXPECT_EQ(during.allocated - before.allocated, 8000);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
    EXPECT_GE(during.peak_allocated, during.allocated);
    peak_target = during.allocated;
  }
  MemoryStats after = memory_stats(kCPU);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.peak_allocated, peak_target);
  reset_peak_memory_stats(kCPU);
  EXPECT_EQ(memory_stats(kCPU).peak_allocated, memory_stats(kCPU).allocated);
  empty_cache(kCPU);  // returns cached large blocks; must not throw
}

TEST(CpuAllocator, StorageIs64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000, 4099}) {
    Tensor t = empty({n}, DType::u8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n << " bytes";
  }
  // Host staging memory is page-locked exactly when a GPU is usable; otherwise it is plain aligned memory.
  // Either way it is at least 64-byte aligned.
  bool pinned = !cuda_available();
  auto p = allocate_pinned(100, &pinned);
  EXPECT_EQ(pinned, cuda_available());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u);
}

TEST(CpuAllocator, LargeBlocksAreReusedNotReturnedToTheSystem) {
  empty_cache(kCPU);
  const MemoryStats s0 = memory_stats(kCPU);
  { Tensor t = empty({1 << 18}, DType::f32); }  // 1 MiB: cached when freed
  const MemoryStats s1 = memory_stats(kCPU);
  EXPECT_EQ(s1.num_system_allocs - s0.num_system_allocs, 1);
  EXPECT_EQ(s1.reserved - s1.allocated, (1 << 20));  // held in the cache
  { Tensor t = empty({1 << 18}, DType::f32); }  // same size: served from the cache
  const MemoryStats s2 = memory_stats(kCPU);
  EXPECT_EQ(s2.num_system_allocs, s1.num_system_allocs);
  EXPECT_EQ(s2.num_allocs - s1.num_allocs, 1);
  empty_cache(kCPU);
  EXPECT_EQ(memory_stats(kCPU).reserved, memory_stats(kCPU).allocated);
}
