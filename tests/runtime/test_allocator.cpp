// CachingAllocator bookkeeping over a fake raw allocator, and the CPU allocator's statistics and alignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

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
  void* raw_alloc(size_t n) {
    if (fail) return nullptr;
    ++allocs;
    uintptr_t p = next;
    next += (n + 4095) / 4096 * 4096 + 4096;
    live.insert(p);
    return reinterpret_cast<void*>(p);
  }
  void raw_free(void* p) {
    ++frees;
    EXPECT_EQ(live.erase(reinterpret_cast<uintptr_t>(p)), 1u) << "raw free of an unknown block";
  }
  CachingAllocator make() {
    return CachingAllocator([this](size_t n) { return raw_alloc(n); }, [this](void* p) { raw_free(p); });
  }
};

}  // namespace

TEST(CachingAllocator, RoundsSizesTo512) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
}

constexpr int64_t kSeg = CachingAllocator::kSmallSegment;  // 2 MiB
constexpr int64_t kMiB = 1 << 20;

// Inside the segment that starts at `seg` (the fake raw allocator spaces segments apart).
bool within(void* p, void* seg, int64_t seg_bytes) {
  const auto d = static_cast<char*>(p) - static_cast<char*>(seg);
  return d >= 0 && d < seg_bytes;
}

TEST(CachingAllocator, SegmentSizes) {
  EXPECT_EQ(CachingAllocator::segment_size(512), size_t(kSeg));
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), size_t(kSeg));  // the largest small request
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), size_t(20 * kMiB));
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB - 512), size_t(20 * kMiB));  // the largest mid request
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), size_t(10 * kMiB));
  EXPECT_EQ(CachingAllocator::segment_size(13 * kMiB + 512), size_t(14 * kMiB));
}

// Small requests share a 2 MiB segment: each takes its rounded size, the best-fitting free block serves it and the
// rest is split off; freed neighbours merge, and a wholly free segment goes back on empty_cache().
TEST(CachingAllocator, SmallRequestsSplitAndMergeWithinASegment) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    EXPECT_EQ(a.allocate(0), nullptr);
    void* p = a.allocate(1000);  // 1024 bytes
    void* q = a.allocate(3000);  // 3072 bytes, right after p
    EXPECT_EQ(static_cast<char*>(q), static_cast<char*>(p) + 1024);
    MemoryStats s = a.stats();
    EXPECT_EQ(s.allocated, 4096);  // what the tensors hold, not the segment
    EXPECT_EQ(s.reserved, kSeg);
    EXPECT_EQ(s.peak_allocated, 4096);
    EXPECT_EQ(s.num_allocs, 2);
    EXPECT_EQ(s.num_system_allocs, 1);

    a.free(p);
    s = a.stats();
    EXPECT_EQ(s.allocated, 3072);
    EXPECT_EQ(s.reserved, kSeg);  // cached
    EXPECT_EQ(s.peak_allocated, 4096);

    // The best fit: p's own 1024-byte block, not the large rest of the segment.
    void* p2 = a.allocate(900);
    EXPECT_EQ(p2, p);
    // q freed merges with the free rest above it; a smaller request then takes its start and splits the rest.
    a.free(q);
    void* r = a.allocate(2000);
    EXPECT_EQ(r, q);
    EXPECT_EQ(a.stats().allocated, 1024 + 2048);
    void* t = a.allocate(500);
    EXPECT_EQ(static_cast<char*>(t), static_cast<char*>(q) + 2048);
    EXPECT_EQ(raw.allocs, 1);

    a.reset_peak();
    EXPECT_EQ(a.stats().peak_allocated, a.stats().allocated);
    EXPECT_EQ(a.stats().allocated, 1024 + 2048 + 512);

    a.empty_cache();  // a segment with live blocks stays
    EXPECT_EQ(raw.frees, 0);
    a.free(r);
    a.free(p2);
    a.free(t);  // the last one merges both ways: the segment is one free block again
    EXPECT_EQ(a.stats().allocated, 0);
    void* whole = a.allocate(kMiB);  // the largest small request fits in the merged segment's start
    EXPECT_EQ(whole, p);
    a.free(whole);
    a.empty_cache();
    EXPECT_EQ(raw.frees, 1);
    EXPECT_EQ(a.stats().reserved, 0);
    a.free(a.allocate(100));  // a fresh segment
    EXPECT_EQ(raw.allocs, 2);
  }
  // Destruction returns the wholly free segments.
  EXPECT_TRUE(raw.live.empty());
  EXPECT_EQ(raw.frees, 2);
}

// Requests over 1 MiB and under 10 MiB share 20 MiB segments; from 10 MiB on a request's fresh segment is its size
// rounded up to 2 MiB. A cached large block is split when more than 1 MiB is left over (less stays with the
// block). Small requests never take large blocks.
TEST(CachingAllocator, LargeRequestsSplitCachedBlocks) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    void* m1 = a.allocate(3 * kMiB);
    void* m2 = a.allocate(5 * kMiB);  // the same 20 MiB segment, right after m1
    EXPECT_EQ(static_cast<char*>(m2), static_cast<char*>(m1) + 3 * kMiB);
    EXPECT_EQ(a.stats().allocated, 8 * kMiB);
    EXPECT_EQ(a.stats().reserved, 20 * kMiB);
    void* big = a.allocate(13 * kMiB);  // a 14 MiB segment of its own; its last 1 MiB stays with it
    EXPECT_EQ(a.stats().allocated, 8 * kMiB + 14 * kMiB);
    EXPECT_EQ(a.stats().reserved, 34 * kMiB);
    a.free(big);
    // The best fit for 4 MiB: the 12 MiB rest of the mid segment, not big's 14 MiB; the 8 MiB after it is split off.
    void* x = a.allocate(4 * kMiB);
    EXPECT_EQ(static_cast<char*>(x), static_cast<char*>(m1) + 8 * kMiB);
    // 10 MiB: only big holds it; its 4 MiB rest is split off.
    void* y = a.allocate(10 * kMiB);
    EXPECT_EQ(y, big);
    EXPECT_EQ(a.stats().allocated, (3 + 5 + 4 + 10) * kMiB);
    EXPECT_EQ(raw.allocs, 2);
    // A small request gets a small segment, though large blocks are free.
    a.free(m1);
    void* small = a.allocate(4096);
    EXPECT_FALSE(within(small, m1, 20 * kMiB));
    EXPECT_FALSE(within(small, big, 14 * kMiB));
    EXPECT_EQ(raw.allocs, 3);
    EXPECT_EQ(a.stats().reserved, 36 * kMiB);
    // Freed in any order, the pieces merge into whole segments again, which empty_cache() returns.
    a.free(x);
    a.free(m2);
    a.free(y);
    a.free(small);
    a.empty_cache();
    EXPECT_EQ(raw.frees, 3);
    EXPECT_EQ(a.stats().reserved, 0);
    EXPECT_EQ(a.stats().allocated, 0);
  }
  EXPECT_TRUE(raw.live.empty());
}

// A step's worth of tensors of mixed sizes, freed and allocated again in another order, reuses what it has: no
// new raw allocation after the first round, and `allocated` stays within 1 MiB per large request of the sum of
// the rounded requests.
TEST(CachingAllocator, ASteadyStepNeedsNoNewSegments) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  const std::vector<size_t> sizes = {3 * kMiB, 100,          5 * kMiB + 7, 70000,    3 * kMiB,
                                     2 * kMiB, 13 * kMiB + 1, 512,         9 * kMiB, 40 * kMiB};
  auto step = [&](bool reverse) {
    std::vector<void*> ptrs;
    int64_t expect = 0;
    for (size_t n : sizes) {
      ptrs.push_back(a.allocate(n));
      expect += static_cast<int64_t>(CachingAllocator::round_size(n));
    }
    const int64_t held = a.stats().allocated;
    EXPECT_GE(held, expect);
    EXPECT_LE(held, expect + 7 * kMiB);  // at most 1 MiB over for each of the 7 large requests
    std::set<void*> distinct(ptrs.begin(), ptrs.end());
    EXPECT_EQ(distinct.size(), sizes.size());
    if (reverse) std::reverse(ptrs.begin(), ptrs.end());
    for (void* p : ptrs) a.free(p);
    EXPECT_EQ(a.stats().allocated, 0);
  };
  step(false);
  const int allocs = raw.allocs;
  step(true);
  step(false);
  EXPECT_EQ(raw.allocs, allocs);
}

// Random allocations, frees, side blocks, captures and empty_cache() calls: live blocks never overlap, every one
// lies in a segment the raw allocator handed out, `allocated` is at least the rounded requests, and once all is
// freed, released and emptied every segment has gone back.
static void random_work(uint64_t seed) {
  FakeRaw raw;
  std::map<uintptr_t, size_t> segments;  // the raw allocator's blocks: start -> size
  CachingAllocator a(
      [&](size_t n) -> void* {
        void* p = raw.raw_alloc(n);
        segments[reinterpret_cast<uintptr_t>(p)] = n;
        return p;
      },
      [&](void* p) {
        segments.erase(reinterpret_cast<uintptr_t>(p));
        raw.raw_free(p);
      });
  std::mt19937_64 rng(seed);
  std::map<uintptr_t, size_t> live;  // start -> rounded request
  std::set<uintptr_t> side;
  std::vector<uint64_t> pools;
  auto check = [&] {
    uintptr_t end = 0;
    int64_t requested = 0;
    for (auto [p, n] : live) {
      ASSERT_GE(p, end) << "two live blocks overlap";
      end = p + n;
      requested += static_cast<int64_t>(n);
      auto seg = segments.upper_bound(p);
      ASSERT_NE(seg, segments.begin());
      --seg;
      ASSERT_LE(p + n, seg->first + seg->second) << "a block outside its segment";
    }
    // At most 1 MiB over per large block; a recycled side block may be up to twice its request.
    int64_t bound = requested;
    for (auto [p, n] : live) bound += side.count(p) ? static_cast<int64_t>(n) : kMiB;
    EXPECT_GE(a.stats().allocated, requested);
    EXPECT_LE(a.stats().allocated, bound);
  };
  for (int i = 0; i < 4000; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 45 || live.empty()) {
      const size_t n = size_t(1) << (rng() % 26);  // 1 byte to 32 MiB, then jittered
      const size_t size = n + rng() % n;
      const bool is_side = rng() % 8 == 0;
      void* p = is_side ? a.allocate_side(size).ptr : a.allocate(size);
      live[reinterpret_cast<uintptr_t>(p)] = CachingAllocator::round_size(size);
      if (is_side) side.insert(reinterpret_cast<uintptr_t>(p));
    } else if (op < 90) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      if (side.erase(it->first)) a.free_side(reinterpret_cast<void*>(it->first), nullptr);
      else a.free(reinterpret_cast<void*>(it->first));
      live.erase(it);
    } else if (op < 93) {
      if (a.active_private_pool() == 0) pools.push_back(a.begin_private_pool());
      else a.end_private_pool();
    } else if (op < 96 && !pools.empty()) {
      a.release_private_pool(pools.front());
      pools.erase(pools.begin());
    } else {
      a.empty_cache();
    }
    check();
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (auto [p, n] : live) {
    if (side.count(p)) a.free_side(reinterpret_cast<void*>(p), nullptr);
    else a.free(reinterpret_cast<void*>(p));
  }
  a.end_private_pool();
  for (uint64_t id : pools) a.release_private_pool(id);
  a.empty_cache();
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_TRUE(segments.empty());
}

TEST(CachingAllocator, RandomWorkKeepsBlocksApartAndReturnsEverySegment) {
  for (uint64_t seed : {7, 11, 23, 42, 99}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_work(seed);
    if (HasFatalFailure()) return;
  }
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
    EXPECT_EQ(st.reserved, kSeg + 1024 * 2 + 3072);  // c2's segment; side blocks s1, s2, big are whole segments
    a.empty_cache();  // the cached side block goes too; c2's segment is in use
    EXPECT_EQ(a.stats().reserved, kSeg + 1024 + 3072);
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
    void* live = a.allocate(3000);  // stays live past the capture, from the rest of the pool's segment
    EXPECT_TRUE(within(live, p1, kSeg));
    EXPECT_EQ(raw.allocs, 2);
    a.free(p2);
    a.end_private_pool();
    EXPECT_EQ(a.active_private_pool(), 0u);

    // General allocations after the capture never get the pool's blocks: they come from g's segment.
    void* q = a.allocate(1000);
    EXPECT_TRUE(within(q, g, kSeg));
    // A pool block freed after the capture goes back to the pool, not to the general pool.
    a.free(live);
    void* q2 = a.allocate(2000);
    EXPECT_TRUE(within(q2, g, kSeg));
    EXPECT_EQ(raw.allocs, 2);

    MemoryStats s = a.stats();
    EXPECT_EQ(s.allocated, 1024 + 1024 + 2048);      // g, q, q2
    EXPECT_EQ(s.reserved, 2 * kSeg);                 // g's segment and the pool's
    EXPECT_EQ(s.peak_allocated, 1024 + 1024 + 3072);  // g, p2 and live during the capture
    EXPECT_EQ(s.num_system_allocs, 2);
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

  // After the capture neither pool gets them back: e comes from the rest of g's segment, es is a fresh side block.
  void* e = a.allocate(1000);
  CachingAllocator::SideBlock es = a.allocate_side(1000);
  EXPECT_EQ(raw.allocs, 4);
  for (void* p : {g, side.ptr, s2.ptr}) {
    EXPECT_NE(e, p);
    EXPECT_NE(es.ptr, p);
  }
  // The pool's side block freed later returns to the pool with its fence dropped.
  auto fence2 = std::make_shared<int>(2);
  a.free_side(s2.ptr, fence2);
  EXPECT_EQ(fence2.use_count(), 1);
  void* e2 = a.allocate(1000);
  EXPECT_EQ(raw.allocs, 4);
  EXPECT_NE(e2, s2.ptr);

  // Released, the pool's free blocks serve general allocations again, with no system call (the best fits: the
  // three 1024-byte blocks before the rest of g's segment).
  a.release_private_pool(id);
  std::set<void*> reused;
  for (int i = 0; i < 3; ++i) reused.insert(a.allocate(1000));
  EXPECT_EQ(reused, std::set<void*>({g, side.ptr, s2.ptr}));
  EXPECT_EQ(raw.allocs, 4);
  MemoryStats st = a.stats();
  EXPECT_EQ(st.allocated, 6 * 1024);
  EXPECT_EQ(st.reserved, kSeg + 3 * 1024);  // g's segment; side, s2 and es
  EXPECT_EQ(st.num_system_allocs, 4);
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
  void* next = a.allocate(1000);  // the general rest of p's segment, not p
  EXPECT_EQ(static_cast<char*>(next), static_cast<char*>(p) + 1024);
  a.release_private_pool(id3);
  EXPECT_EQ(a.allocate(1000), p);
  EXPECT_EQ(raw.allocs, 1);
}

// No raw free (cudaFree) while a pool is active: empty_cache does nothing and running out of memory throws
// without dropping the cache; outside a capture empty_cache keeps the reserved pools' free blocks.
TEST(CachingAllocator, NoRawFreeWhileAPrivatePoolIsActive) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  a.free(a.allocate(512));                              // a cached general segment
  a.free_side(a.allocate_side(512).ptr, nullptr);       // a cached side block
  const uint64_t id = a.begin_private_pool();
  a.free(a.allocate(4096));                             // a cached pool segment
  a.empty_cache();
  EXPECT_EQ(raw.frees, 0);
  EXPECT_EQ(a.stats().reserved, kSeg + 512 + kSeg);
  raw.fail = true;
  try {
    a.allocate(4 * kMiB);  // more than any cached block: the raw allocator must be asked
    FAIL() << "expected volt::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of device memory during CUDA graph capture"), std::string::npos) << m;
    EXPECT_NE(m.find("4194304"), std::string::npos) << m;
  }
  EXPECT_THROW(a.allocate_side(1 << 20), Error);
  EXPECT_EQ(raw.frees, 0);
  EXPECT_EQ(a.stats().reserved, kSeg + 512 + kSeg);
  EXPECT_EQ(a.stats().allocated, 0);
  raw.fail = false;
  a.end_private_pool();

  a.empty_cache();  // the general and side blocks go; the pool's segment stays reserved for its graph
  EXPECT_EQ(raw.frees, 2);
  EXPECT_EQ(a.stats().reserved, kSeg);
  raw.fail = true;  // out of memory outside a capture drops the general cache only
  EXPECT_THROW(a.allocate(4 * kMiB), Error);
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
    a.allocate(4 * kMiB);
    FAIL() << "expected volt::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("4194304"), std::string::npos) << m;
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
