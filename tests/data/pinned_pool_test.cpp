// The pinned buffer pool: blocks are reused by size, survive the pool, and report pinned-ness.
#include <gtest/gtest.h>

#include <volt/data/pinned_pool.h>
#include <volt/runtime/allocator.h>
#include <volt/kernels/ops.h>

namespace volt::data {
namespace {

TEST(PinnedPool, ReusesFreedBlocksOfTheSameSize) {
  int raw_calls = 0;
  PinnedPool pool([&](size_t n, bool* pinned) {
    ++raw_calls;
    *pinned = false;
    return allocate(kCPU, n);
  });
  void* first = nullptr;
  {
    Tensor a = pool.empty({16, 784}, DType::f32);
    EXPECT_EQ(a.shape(), (Shape{16, 784}));
    EXPECT_EQ(a.nbytes(), 16u * 784u * 4u);
    EXPECT_FALSE(a.storage()->pinned);
    a.fill_(2.0);
    EXPECT_EQ(a.sum().item(), 2.0 * 16 * 784);
    first = a.data_ptr();
    EXPECT_EQ(pool.live_blocks(), 1u);
  }
  EXPECT_EQ(pool.cached_blocks(), 1u);
  Tensor b = pool.empty({16, 784}, DType::f32);  // same rounded size: the cached block
  EXPECT_EQ(b.data_ptr(), first);
  EXPECT_EQ(raw_calls, 1);
  Tensor c = pool.empty({16}, DType::i64);  // a different size: a new block
  EXPECT_NE(c.data_ptr(), first);
  EXPECT_EQ(raw_calls, 2);
  EXPECT_EQ(pool.live_blocks(), 2u);
  EXPECT_EQ(pool.cached_blocks(), 0u);
  pool.record_async_use(b, Stream{});  // no GPU: a no-op event, reuse still works
  b = Tensor();
  Tensor d = pool.empty({16, 784}, DType::f32);
  EXPECT_EQ(d.data_ptr(), first);
}

TEST(PinnedPool, TensorsMayOutliveThePool) {
  Tensor keep;
  {
    PinnedPool pool;
    keep = pool.empty({100}, DType::u8);
    keep.fill_(7.0);
  }
  EXPECT_EQ(keep.to_vector<int>()[99], 7);  // memory still valid; freed with the tensor
}

TEST(PinnedPool, LoaderBuffersArePlainWithoutCuda) {
  Tensor t = empty_pinned_batch({4, 4}, DType::f32);
  EXPECT_EQ(t.storage()->pinned, cuda_available());
  EXPECT_EQ(t.shape(), (Shape{4, 4}));
}

}  // namespace
}  // namespace volt::data
