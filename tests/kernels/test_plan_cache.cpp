// PlanCache: the cache behind cuDNN convolution plans (kernels/cuda/conv.cu), tested on the CPU.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <volt/kernels/common/plan_cache.h>

using namespace volt;

namespace {
using Key = PlanKey<3>;
using Cache = PlanCache<Key, std::string, PlanKeyHash<3>>;
Key key(int64_t a, int64_t b, int64_t c) { return Key{{a, b, c}}; }
}  // namespace

TEST(PlanCache, PlansEachKeyOnceAndCountsHits) {
  Cache cache(8);
  int made = 0;
  auto make = [&](std::string s) {
    return [&made, s] {
      ++made;
      return std::make_shared<const std::string>(s);
    };
  };
  auto a1 = cache.get_or_create(key(64, 3, 28), make("a"));
  auto a2 = cache.get_or_create(key(64, 3, 28), make("other"));
  auto b = cache.get_or_create(key(64, 3, 14), make("b"));
  EXPECT_EQ(*a1, "a");
  EXPECT_EQ(a1.get(), a2.get());  // the same plan object
  EXPECT_EQ(*b, "b");
  EXPECT_EQ(made, 2);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(PlanCache, EvictsTheLeastRecentlyUsedAndKeepsHandedOutPlansAlive) {
  Cache cache(2);
  auto p1 = cache.get_or_create(key(1, 0, 0), [] { return std::make_shared<const std::string>("1"); });
  cache.get_or_create(key(2, 0, 0), [] { return std::make_shared<const std::string>("2"); });
  cache.get_or_create(key(1, 0, 0), [] { return std::make_shared<const std::string>("1 again"); });  // touch 1
  cache.get_or_create(key(3, 0, 0), [] { return std::make_shared<const std::string>("3"); });  // evicts 2
  EXPECT_EQ(cache.size(), 2u);
  int remade = 0;
  cache.get_or_create(key(1, 0, 0), [&] { ++remade; return std::make_shared<const std::string>("x"); });
  EXPECT_EQ(remade, 0);
  cache.get_or_create(key(2, 0, 0), [&] { ++remade; return std::make_shared<const std::string>("2'"); });
  EXPECT_EQ(remade, 1);
  EXPECT_EQ(*p1, "1");  // still valid whatever was evicted
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*p1, "1");
}

TEST(PlanCache, KeysDifferInAnyField) {
  PlanKeyHash<3> h;
  EXPECT_FALSE(key(1, 2, 3) == key(1, 2, 4));
  EXPECT_TRUE(key(1, 2, 3) == key(1, 2, 3));
  EXPECT_EQ(h(key(1, 2, 3)), h(key(1, 2, 3)));
  EXPECT_NE(h(key(1, 2, 3)), h(key(3, 2, 1)));
}

TEST(PlanCache, ConcurrentCallersShareOnePlan) {
  Cache cache(16);
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  std::vector<const std::string*> seen(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto p = cache.get_or_create(key(7, 7, 7), [&] {
          ++made;
          return std::make_shared<const std::string>("plan");
        });
        seen[t] = p.get();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), 1);
  for (auto* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(cache.hits() + cache.misses(), 1600);
}
