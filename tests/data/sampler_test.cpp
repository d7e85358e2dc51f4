// Samplers: order, determinism per (seed, epoch), and distributed shard layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "common/gradcheck.h"
#include <volt/data/sampler.h>

namespace volt::data {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(Sampler, SequentialIsInOrder) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), iota(5));
  s.set_epoch(3);
  EXPECT_EQ(s.indices(), iota(5));
}

TEST(Sampler, RandomIsAPermutationFixedBySeedAndEpoch) {
  RandomSampler a(100, 5), b(100, 5), c(100, 6);
  auto e0 = a.indices();
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  EXPECT_EQ(e0, b.indices());
  EXPECT_NE(e0, c.indices());
  a.set_epoch(1);
  auto e1 = a.indices();
  EXPECT_NE(e0, e1);
  b.set_epoch(1);
  EXPECT_EQ(e1, b.indices());
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), e0);  // a function of (seed, epoch), not of history
}

// Every sample appears exactly once over all ranks' shards.
void expect_exact_cover(int64_t n, int64_t replicas, bool shuffle) {
  std::map<int64_t, int> seen;
  int64_t total = 0;
  for (int64_t r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, shuffle, 11, /*drop_last=*/false, /*pad=*/false);
    s.set_epoch(2);
    auto idx = s.indices();
    EXPECT_EQ(static_cast<int64_t>(idx.size()), s.size());
    // Uneven shards: the first n % R ranks hold one more.
    EXPECT_EQ(s.size(), n / replicas + (r < n % replicas ? 1 : 0)) << "rank " << r;
    for (int64_t i : idx) ++seen[i];
    total += s.size();
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
  for (auto& [i, c] : seen) EXPECT_EQ(c, 1) << "sample " << i;
}

TEST(Sampler, DistributedUnpaddedCoversEverySampleOnce) {
  for (bool shuffle : {false, true}) {
    expect_exact_cover(10, 2, shuffle);
    expect_exact_cover(11, 2, shuffle);
    expect_exact_cover(10, 3, shuffle);
    expect_exact_cover(11, 3, shuffle);
    expect_exact_cover(2, 3, shuffle);  // more ranks than samples: one shard is empty
  }
}

TEST(Sampler, DistributedSequentialIsRankStrided) {
  DistributedSampler r0(7, 3, 0, false), r1(7, 3, 1, false), r2(7, 3, 2, false);
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(r1.indices(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(r2.indices(), (std::vector<int64_t>{2, 5}));
}

TEST(Sampler, DistributedPaddedShardsAreEqualAndRepeatFromTheStart) {
  // 7 samples on 3 ranks: padded to 9 by repeating positions 0 and 1 of the order.
  DistributedSampler r0(7, 3, 0, false, 0, false, true), r1(7, 3, 1, false, 0, false, true),
      r2(7, 3, 2, false, 0, false, true);
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(r1.indices(), (std::vector<int64_t>{1, 4, 0}));
  EXPECT_EQ(r2.indices(), (std::vector<int64_t>{2, 5, 1}));
  for (auto* s : {&r0, &r1, &r2}) EXPECT_EQ(s->size(), 3);
  // Shuffled and padded: equal sizes, every sample at least once.
  std::map<int64_t, int> seen;
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(10, 3, r, true, 9, false, true);
    EXPECT_EQ(s.size(), 4);
    for (int64_t i : s.indices()) ++seen[i];
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Sampler, DistributedDropLastTruncates) {
  DistributedSampler r0(7, 3, 0, false, 0, true), r2(7, 3, 2, false, 0, true);
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(r2.indices(), (std::vector<int64_t>{2, 5}));
}

TEST(Sampler, DistributedShuffleAgreesAcrossRanksAndVariesByEpoch) {
  // Ranks must derive the same global order: the union of shards is a permutation for every epoch.
  std::vector<int64_t> e0, e1;
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> all;
    for (int64_t r = 0; r < 2; ++r) {
      DistributedSampler s(8, 2, r, true, 3);
      s.set_epoch(epoch);
      auto v = s.indices();
      all.insert(all.end(), v.begin(), v.end());
    }
    (epoch == 0 ? e0 : e1) = all;
  }
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  EXPECT_EQ(e0, iota(8));
}

TEST(Sampler, DistributedRejectsBadArguments) {
  VOLT_EXPECT_ERROR(DistributedSampler(10, 2, 2), "rank 2", "2 replicas");
  VOLT_EXPECT_ERROR(DistributedSampler(10, 0, 0), "num_replicas", "got 0");
  VOLT_EXPECT_ERROR(DistributedSampler(10, 2, 0, true, 0, true, true), "exclusive");
}

}  // namespace
}  // namespace volt::data
