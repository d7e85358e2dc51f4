// CachingAllocator bookkeeping over a fake raw allocator, and the CPU allocator's statistics and alignment.
#include <gtest/gtest.h>


#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>

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

// The side pool (allocate_for_writer: batch uploads on the copy stream): its blocks and the compute pool's never
// trade places, a recycled side block carries the fence of its last reader for the writer to wait on, and
// statistics, empty_cache and the out-of-memory retry cover both pools.
TEST(CachingAllocator, SidePoolKeepsApartAndCarriesTheLastReader) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    EXPECT_EQ(a.allocate_side(0).ptr, nullptr);
    CachingAllocator::SideBlock s1 = a.allocate_side(1000);
    ASSERT_NE(s1.ptr, nullptr);
    EXPECT_EQ(s1.wait_for, nullptr);  // fresh from the system: nothing to wait for
    void* c1 = a.allocate(1000);
    EXPECT_NE(c1, s1.ptr);
    EXPECT_EQ(a.stats().allocated, 2048);
    EXPECT_EQ(a.stats().num_system_allocs, 2);

    // A compute block freed while compute kernels may still use it is never handed to a side writer...
    a.free(c1);
    CachingAllocator::SideBlock s2 = a.allocate_side(1000);
    EXPECT_NE(s2.ptr, c1);
    EXPECT_EQ(a.stats().num_system_allocs, 3);
    // ...and a side block freed with its reader's fence is never handed to the compute pool.
    auto reader = std::make_shared<int>(42);  // stands for the compute-stream event
    a.free_side(s1.ptr, reader);
    void* c2 = a.allocate(1000);
    EXPECT_EQ(c2, c1);  // the cached compute block, not the side one
    // The next side allocation of that size recycles the side block with its fence.
    CachingAllocator::SideBlock s3 = a.allocate_side(900);
    EXPECT_EQ(s3.ptr, s1.ptr);
    EXPECT_EQ(s3.wait_for, reader);
    EXPECT_EQ(a.stats().num_system_allocs, 3);
    // Reused once, the fence is handed over, not kept: a second user gets the newer one.
    auto reader2 = std::make_shared<int>(7);
    a.free_side(s3.ptr, reader2);
    EXPECT_EQ(reader.use_count(), 2);  // this test's and s3's copies only
    CachingAllocator::SideBlock s4 = a.allocate_side(1000);
    EXPECT_EQ(s4.ptr, s1.ptr);
    EXPECT_EQ(s4.wait_for, reader2);
    // A request the cached side block cannot hold gets a fresh block.
    a.free_side(s4.ptr, nullptr);
    CachingAllocator::SideBlock big = a.allocate_side(3000);
    EXPECT_NE(big.ptr, s1.ptr);
    EXPECT_EQ(big.wait_for, nullptr);

    MemoryStats st = a.stats();
    EXPECT_EQ(st.allocated, 1024 + 1024 + 3072);  // c2, s2, big
    EXPECT_EQ(st.reserved, 1024 * 3 + 3072);
    a.empty_cache();  // the cached side block goes too
    EXPECT_EQ(a.stats().reserved, 1024 * 2 + 3072);
    a.free_side(s2.ptr, reader);
    a.free_side(big.ptr, nullptr);
    a.free(c2);
    EXPECT_EQ(a.stats().allocated, 0);
  }
  EXPECT_TRUE(raw.live.empty());  // destruction returns cached blocks of both pools
}

TEST(CachingAllocator, OutOfMemoryDropsSideCacheToo) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  a.free_side(a.allocate_side(512).ptr, std::make_shared<int>(1));
  raw.fail = true;
  EXPECT_THROW(a.allocate(1 << 20), Error);
  EXPECT_EQ(raw.frees, 1);
  EXPECT_EQ(a.stats().reserved, 0);
}

// Private pools (CUDA graph capture, runtime/cuda_graph.h): blocks freed during the capture are reused by the
// capture only, never by general allocations afterwards, until the pool is released.
TEST(CachingAllocator, PrivatePoolKeepsItsBlocksFromGeneralAllocations) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    EXPECT_EQ(a.active_private_pool(), 0u);
    void* g = a.allocate(1000);  // general, live through the capture
    const uint64_t id = a.begin_private_pool();
    EXPECT_NE(id, 0u);
    EXPECT_EQ(a.active_private_pool(), id);
    EXPECT_THROW(a.begin_private_pool(), Error);  // one capture at a time

    void* p1 = a.allocate(1000);  // the pool has nothing yet: a fresh block
    EXPECT_NE(p1, g);
    EXPECT_EQ(raw.allocs, 2);
    a.free(p1);
    void* p2 = a.allocate(900);  // reused within the capture
    EXPECT_EQ(p2, p1);
    EXPECT_EQ(raw.allocs, 2);
    void* live = a.allocate(3000);  // stays live past the capture
    EXPECT_EQ(raw.allocs, 3);
    a.free(p2);
    a.end_private_pool();
    EXPECT_EQ(a.active_private_pool(), 0u);

    // General allocations after the capture never get the pool's blocks.
    void* q = a.allocate(1000);
    EXPECT_NE(q, p1);
    EXPECT_EQ(raw.allocs, 4);
    // A pool block freed after the capture goes back to the pool, not to the general pool.
    a.free(live);
    void* q2 = a.allocate(2000);
    EXPECT_NE(q2, live);
    EXPECT_EQ(raw.allocs, 5);

    MemoryStats s = a.stats();
    EXPECT_EQ(s.allocated, 1024 + 1024 + 2048);      // g, q, q2
    EXPECT_EQ(s.reserved, 1024 * 3 + 3072 + 2048);   // g, p1, q, live, q2
    EXPECT_EQ(s.peak_allocated, 1024 + 1024 + 3072);  // g, p2 and live during the capture
    EXPECT_EQ(s.num_system_allocs, 5);
    a.free(g);
    a.free(q);
    a.free(q2);
    EXPECT_EQ(a.stats().allocated, 0);
  }
  EXPECT_TRUE(raw.live.empty());  // destruction returns the pool's free blocks too
}

// Only the capturing thread allocates from the pool: another thread's tensor must never share memory with the
// graph's temporaries, so it gets general blocks meanwhile.
TEST(CachingAllocator, PrivatePoolServesOnlyTheCapturingThread) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    void* cached = a.allocate(1000);
    a.free(cached);  // a general block in the cache
    a.begin_private_pool();
    void* mine = a.allocate(1000);
    EXPECT_NE(mine, cached);  // the capture does not take general blocks
    a.free(mine);             // now in the pool
    void* other = nullptr;
    std::thread([&] { other = a.allocate(1000); }).join();
    EXPECT_EQ(other, cached);  // the other thread: the general cache, not the pool's free block
    void* again = a.allocate(1000);
    EXPECT_EQ(again, mine);
    a.free(again);
    a.end_private_pool();
    a.free(other);
    EXPECT_EQ(a.stats().allocated, 0);
  }
  EXPECT_TRUE(raw.live.empty());
}

// General blocks (compute and side) freed during the capture join the pool: the graph may read them when it
// replays, so eager work must not get them; the capture itself reuses them.
TEST(CachingAllocator, PrivatePoolAdoptsBlocksFreedDuringTheCapture) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  void* g = a.allocate(1000);
  CachingAllocator::SideBlock side = a.allocate_side(1000);
  auto fence = std::make_shared<int>(1);
  const uint64_t id = a.begin_private_pool();
  a.free(g);
  a.free_side(side.ptr, fence);
  EXPECT_EQ(fence.use_count(), 1);  // no fence is kept for a block of the pool
  // The capture reuses both adopted blocks (no fresh block from the system).
  void* c1 = a.allocate(1000);
  void* c2 = a.allocate(1000);
  EXPECT_EQ(std::set<void*>({c1, c2}), std::set<void*>({g, side.ptr}));
  EXPECT_EQ(raw.allocs, 2);
  // A side allocation during the capture takes a fresh block (its writer runs outside the captured stream) that
  // belongs to the pool.
  CachingAllocator::SideBlock s2 = a.allocate_side(1000);
  EXPECT_EQ(s2.wait_for, nullptr);
  EXPECT_EQ(raw.allocs, 3);
  a.free(c1);
  a.free(c2);
  a.end_private_pool();

  // After the capture neither pool gets them back.
  void* e = a.allocate(1000);
  CachingAllocator::SideBlock es = a.allocate_side(1000);
  EXPECT_EQ(raw.allocs, 5);
  for (void* p : {g, side.ptr, s2.ptr}) {
    EXPECT_NE(e, p);
    EXPECT_NE(es.ptr, p);
  }
  // The pool's side block freed later returns to the pool with its fence dropped.
  auto fence2 = std::make_shared<int>(2);
  a.free_side(s2.ptr, fence2);
  EXPECT_EQ(fence2.use_count(), 1);
  void* e2 = a.allocate(1000);
  EXPECT_EQ(raw.allocs, 6);
  EXPECT_NE(e2, s2.ptr);

  // Released, the pool's free blocks serve general allocations again, with no system call.
  a.release_private_pool(id);
  std::set<void*> reused;
  for (int i = 0; i < 3; ++i) reused.insert(a.allocate(1000));
  EXPECT_EQ(reused, std::set<void*>({g, side.ptr, s2.ptr}));
  EXPECT_EQ(raw.allocs, 6);
  MemoryStats st = a.stats();
  EXPECT_EQ(st.allocated, 6 * 1024);
  EXPECT_EQ(st.reserved, 6 * 1024);
  EXPECT_EQ(st.num_system_allocs, 6);
}

TEST(CachingAllocator, ReleasedPoolsLiveBlocksGoToTheGeneralPoolWhenFreed) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  const uint64_t id = a.begin_private_pool();
  void* p = a.allocate(1000);
  a.end_private_pool();
  a.release_private_pool(id);
  a.release_private_pool(id);  // an already released pool: ignored
  a.free(p);                   // no pool to return to: the general pool
  EXPECT_EQ(a.allocate(1000), p);
  EXPECT_EQ(raw.allocs, 1);

  // Releasing the active pool (an aborted capture) also ends it.
  const uint64_t id2 = a.begin_private_pool();
  EXPECT_NE(id2, id);  // ids are never reused
  a.release_private_pool(id2);
  EXPECT_EQ(a.active_private_pool(), 0u);
  a.free(p);  // not adopted by the released pool
  EXPECT_EQ(a.allocate(1000), p);
  EXPECT_EQ(raw.allocs, 1);
  // A block of a released pool freed during a later capture is adopted by that capture's pool.
  const uint64_t id3 = a.begin_private_pool();
  a.free(p);
  EXPECT_EQ(a.allocate(700), p);
  a.free(p);
  a.end_private_pool();
  EXPECT_NE(a.allocate(1000), p);
  EXPECT_EQ(raw.allocs, 2);
  a.release_private_pool(id3);
  EXPECT_EQ(a.allocate(1000), p);
  EXPECT_EQ(raw.allocs, 2);
}

// No raw free (cudaFree) while a pool is active: empty_cache does nothing and running out of memory throws
// without dropping the cache; outside a capture empty_cache keeps the reserved pools' free blocks.
TEST(CachingAllocator, NoRawFreeWhileAPrivatePoolIsActive) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  a.free(a.allocate(512));                              // a cached general block
  a.free_side(a.allocate_side(512).ptr, nullptr);       // a cached side block
  const uint64_t id = a.begin_private_pool();
  a.free(a.allocate(4096));                             // a cached pool block
  a.empty_cache();
  EXPECT_EQ(raw.frees, 0);
  EXPECT_EQ(a.stats().reserved, 512 + 512 + 4096);
  raw.fail = true;
  try {
    a.allocate(1 << 20);
    FAIL() << "expected volt::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of device memory during CUDA graph capture"), std::string::npos) << m;
    EXPECT_NE(m.find("1048576"), std::string::npos) << m;
  }
  EXPECT_THROW(a.allocate_side(1 << 20), Error);
  EXPECT_EQ(raw.frees, 0);
  EXPECT_EQ(a.stats().reserved, 512 + 512 + 4096);
  EXPECT_EQ(a.stats().allocated, 0);
  raw.fail = false;
  a.end_private_pool();

  a.empty_cache();  // the general and side blocks go; the pool's block stays reserved for its graph
  EXPECT_EQ(raw.frees, 2);
  EXPECT_EQ(a.stats().reserved, 4096);
  raw.fail = true;  // out of memory outside a capture drops the general cache only
  EXPECT_THROW(a.allocate(1 << 20), Error);
  EXPECT_EQ(raw.frees, 2);
  raw.fail = false;
  a.release_private_pool(id);
  a.empty_cache();
  EXPECT_EQ(raw.frees, 3);
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_TRUE(raw.live.empty());
}

TEST(CachingAllocator, AllocateForWriterOnTheCpuIsPlainMemory) {
  auto p = allocate_for_writer(kCPU, 256, get_stream(kCPU, StreamKind::Copy));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u);
  if (!cuda_available()) {
    EXPECT_THROW(allocate_for_writer(cuda_device(0), 256, get_stream(kCPU, StreamKind::Copy)), Error);
  }
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
