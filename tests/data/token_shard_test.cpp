// Token shards (GPT-2 shard format, memory-mapped), the byte tokenizer, next-token windows and their layout
// per step and per data-parallel rank.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include "common/gradcheck.h"
#include "data/temp_dir.h"
#include <volt/data/data.h>

using namespace volt;
using namespace volt::data;
using volt::data::testing::TempDir;

namespace {

// A shard file with an arbitrary header (magic, version, count) and token payload of `payload` tokens, with
// `extra` stray bytes appended.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count,
               const std::vector<uint16_t>& payload, int extra = 0) {
  std::vector<int32_t> head(256, 0);
  head[0] = magic;
  head[1] = version;
  head[2] = count;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(head.data()), 1024);
  f.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size() * 2));
  for (int i = 0; i < extra; ++i) f.put('x');
}

// Opens a shard and drops it (the errors are the point).
void open_shard(const std::string& path, int64_t vocab_size = 65536) { TokenShard s(path, vocab_size); }

std::vector<uint16_t> iota_tokens(int n, int start = 0) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint16_t>(start + i);
  return v;
}

}  // namespace

TEST(TokenShard, WriteAndMap) {
  TempDir dir;
  const auto toks = iota_tokens(1000, 7);
  write_token_shard(dir.file("a.bin"), toks);
  // The layout on disk: header of 256 int32, then the tokens.
  std::ifstream f(dir.file("a.bin"), std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(raw.size(), 1024u + 2000u);
  int32_t head[3];
  std::memcpy(head, raw.data(), 12);
  EXPECT_EQ(head[0], 20240520);
  EXPECT_EQ(head[1], 1);
  EXPECT_EQ(head[2], 1000);
  uint16_t t5;
  std::memcpy(&t5, raw.data() + 1024 + 10, 2);
  EXPECT_EQ(t5, 12);

  TokenShard s(dir.file("a.bin"), 2000);
  EXPECT_TRUE(s.mapped());
  EXPECT_EQ(s.size(), 1000);
  EXPECT_EQ(s.name(), dir.file("a.bin"));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s[i], toks[static_cast<size_t>(i)]);
  // An empty shard is valid (and holds no window).
  write_token_shard(dir.file("empty.bin"), {});
  EXPECT_EQ(TokenShard(dir.file("empty.bin")).size(), 0);
}

TEST(TokenShard, BadFilesNameTheFileAndTheProblem) {
  TempDir dir;
  const std::string p = dir.file("bad.bin");
  VOLT_EXPECT_ERROR(open_shard(dir.file("none.bin")), "none.bin", "cannot open");
  {
    std::ofstream f(p, std::ios::binary);
    f << "short";
  }
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "truncated: 5 bytes, shorter than the 1024-byte header");
  write_raw(p, 20240521, 1, 4, iota_tokens(4));
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "wrong magic number 20240521", "expected 20240520");
  write_raw(p, 20240520, 2, 4, iota_tokens(4));
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "unsupported version 2");
  write_raw(p, 20240520, 1, 10, iota_tokens(4));
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "truncated: the header says 10 tokens (20 bytes)",
                    "holds 8 bytes");
  write_raw(p, 20240520, 1, 4, iota_tokens(6));
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "token count mismatch: the header says 4 tokens", "(6 tokens)");
  write_raw(p, 20240520, 1, 4, iota_tokens(4), 1);
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "token count mismatch", "one stray byte");
  write_raw(p, 20240520, 1, -3, {});
  VOLT_EXPECT_ERROR(open_shard(p), p.c_str(), "negative token count -3");
  write_raw(p, 20240520, 1, 5, {1, 2, 300, 4, 5});
  VOLT_EXPECT_ERROR(open_shard(p, 256), p.c_str(), "token 300 at position 2 is >= vocab_size 256");
  EXPECT_EQ(TokenShard(p, 301).size(), 5);  // fits a larger vocabulary
  VOLT_EXPECT_ERROR(TokenShard(std::vector<uint16_t>{1, 256}, "text", 256), "'text'", "token 256 at position 1");
}

TEST(ByteTokenizer, RoundTrip) {
  const std::string s("Ab\n\xff\x00z", 6);  // with a NUL byte inside
  const auto t = ByteTokenizer::encode(s);
  EXPECT_EQ(t, (std::vector<uint16_t>{65, 98, 10, 255, 0, 122}));
  std::vector<int64_t> ids(t.begin(), t.end());
  EXPECT_EQ(ByteTokenizer::decode(ids), s);
  VOLT_EXPECT_ERROR(ByteTokenizer::decode({65, 256}), "token 256 at position 1", "not a byte");
}

// Window j of a shard: input tokens [jT, jT+T), target [jT+1, jT+T+1); windows never cross shards.
TEST(TokenWindowDataset, WindowsAcrossShards) {
  auto a = std::make_shared<TokenShard>(iota_tokens(10, 0), "a");     // windows at 0, 3, 6 (T = 3)
  auto b = std::make_shared<TokenShard>(iota_tokens(4, 100), "b");    // one window (100..103)
  auto c = std::make_shared<TokenShard>(iota_tokens(3, 200), "c");    // too short: none
  TokenWindowDataset ds({a, b, c}, 3);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.windows_in_shard(0), 3);
  EXPECT_EQ(ds.windows_in_shard(1), 1);
  EXPECT_EQ(ds.windows_in_shard(2), 0);
  EXPECT_EQ(ds.num_tokens(), 17);
  Batch s = ds.get(2);
  EXPECT_EQ(s.input.shape(), (Shape{3}));
  EXPECT_EQ(s.input.dtype(), DType::i64);
  EXPECT_EQ(s.input.to_vector<int64_t>(), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(s.target.to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
  Batch bt = ds.get_batch({3, 0});
  EXPECT_EQ(bt.input.shape(), (Shape{2, 3}));
  EXPECT_EQ(bt.input.to_vector<int64_t>(), (std::vector<int64_t>{100, 101, 102, 0, 1, 2}));
  EXPECT_EQ(bt.target.to_vector<int64_t>(), (std::vector<int64_t>{101, 102, 103, 1, 2, 3}));
  Batch pinned = ds.get_batch_pinned({3, 0});
  EXPECT_EQ(pinned.input.to_vector<int64_t>(), bt.input.to_vector<int64_t>());
  EXPECT_EQ(pinned.target.to_vector<int64_t>(), bt.target.to_vector<int64_t>());
  VOLT_EXPECT_ERROR(ds.get(4), "index 4 is out of range for 4 windows");
  VOLT_EXPECT_ERROR(TokenWindowDataset({c}, 3), "no window of seq_len + 1 = 4 tokens", "'c' (3 tokens)");
  VOLT_EXPECT_ERROR(TokenWindowDataset({a}, 0), "seq_len must be positive, got 0");
}

// A sequential loader's batch k is the reference's step k: the B*T+1 tokens from position k*B*T, row b being
// tokens [kBT + bT, kBT + bT + T] (input the first T, target the last T).
TEST(TokenWindowDataset, StepLayoutMatchesTheReference) {
  TempDir dir;
  const int B = 2, T = 4, steps = 3;
  const auto toks = iota_tokens(B * T * steps + 1, 1);
  write_token_shard(dir.file("s.bin"), toks);
  auto ds = std::make_shared<TokenWindowDataset>(
      std::vector<std::shared_ptr<const TokenShard>>{std::make_shared<TokenShard>(dir.file("s.bin"))}, T);
  DataLoader loader(ds, {.batch_size = B, .drop_last = true});
  int k = 0;
  for (const Batch& b : loader) {
    const auto in = b.input.to_vector<int64_t>();
    const auto tg = b.target.to_vector<int64_t>();
    for (int r = 0; r < B; ++r)
      for (int t = 0; t < T; ++t) {
        const int pos = k * B * T + r * T + t;
        ASSERT_EQ(in[static_cast<size_t>(r * T + t)], toks[static_cast<size_t>(pos)]) << k << " " << r << " " << t;
        ASSERT_EQ(tg[static_cast<size_t>(r * T + t)], toks[static_cast<size_t>(pos + 1)]);
      }
    ++k;
  }
  EXPECT_EQ(k, steps);
}

// Per rank: RankBatchSampler (llm.c's contiguous runs) and the Trainer's DistributedSampler (interleaved) cover the
// same windows at every step: those of one process's step at batch B*R.
TEST(TokenWindowDataset, RanksShareEachStepsWindows) {
  const int64_t n = 50, B = 3, R = 3;
  std::vector<std::vector<int64_t>> contiguous, interleaved;
  for (int64_t r = 0; r < R; ++r) {
    RankBatchSampler s(n, B, R, r);
    EXPECT_EQ(s.size(), 5 * B);  // floor(50 / 9) = 5 steps
    contiguous.push_back(s.indices());
    interleaved.push_back(DistributedSampler(n, R, r, /*shuffle=*/false).indices());
  }
  EXPECT_EQ(contiguous[1][0], 3);  // rank 1, step 0: windows 3, 4, 5
  EXPECT_EQ(contiguous[1][3], 12);  // step 1: windows 12, 13, 14
  for (int64_t k = 0; k < 5; ++k) {
    std::set<int64_t> a, b, want;
    for (int64_t j = 0; j < B * R; ++j) want.insert(k * B * R + j);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < B; ++j) {
        a.insert(contiguous[static_cast<size_t>(r)][static_cast<size_t>(k * B + j)]);
        b.insert(interleaved[static_cast<size_t>(r)][static_cast<size_t>(k * B + j)]);
      }
    EXPECT_EQ(a, want) << "step " << k;
    EXPECT_EQ(b, want) << "step " << k;
  }
  // One rank: the windows in order.
  EXPECT_EQ(RankBatchSampler(7, 2).indices(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  VOLT_EXPECT_ERROR(RankBatchSampler(7, 2, 2, 2), "rank 2 is out of range [0, 2)");
  VOLT_EXPECT_ERROR(RankBatchSampler(7, 0), "batch_size must be positive, got 0");
}
