// nn::SafetensorsReader: one tensor at a time, the same values and checks as load_safetensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/nn/safetensors_reader.h>

#include "common/gradcheck.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("volt_st_reader_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST(SafetensorsReader, ReadsEachTensorAsLoadSafetensors) {
  const std::string path = temp_file("a.safetensors");
  nn::StateDict sd = {{"w", arange(0, 12, 1, DType::f32).reshape({3, 4})},
                      {"b", from_vector<double>({1.5, -2.0})},
                      {"n", from_vector<int64_t>({7})},
                      {"e", zeros({0, 3})}};
  nn::save_safetensors(path, sd, {{"format", "x"}});
  nn::SafetensorsReader reader(path);
  EXPECT_EQ(reader.metadata().at("format"), "x");
  const auto all = nn::load_safetensors(path);
  ASSERT_EQ(reader.entries().size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].first);
    const auto& e = reader.entries()[i];
    EXPECT_EQ(e.name, all[i].first);  // the same (data-offset) order
    Tensor t = reader.read(e);
    EXPECT_EQ(t.shape(), all[i].second.shape());
    EXPECT_EQ(t.dtype(), all[i].second.dtype());
    EXPECT_EQ(t.to_vector<double>(), all[i].second.to_vector<double>());
  }
  // Out of order, and twice: reads seek.
  const auto* n = reader.find("n");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(reader.read(*n).to_vector<int64_t>(), (std::vector<int64_t>{7}));
  EXPECT_EQ(reader.read(*reader.find("w")).to_vector<float>()[11], 11.0f);
  EXPECT_EQ(reader.find("missing"), nullptr);
  fs::remove(path);
}

TEST(SafetensorsReader, ReadIntoFillsInPlace) {
  const std::string path = temp_file("b.safetensors");
  nn::save_safetensors(path, {{"w", arange(0, 6, 1, DType::f32).reshape({2, 3})}});
  nn::SafetensorsReader reader(path);
  const auto& e = reader.entries()[0];
  // A contiguous CPU destination: the same storage receives the values.
  Tensor dst = zeros({2, 3});
  Tensor alias = dst;
  reader.read_into(e, dst);
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // A strided destination goes through one temporary.
  Tensor big = zeros({3, 2});
  Tensor view = big.transpose(0, 1);
  ASSERT_FALSE(view.is_contiguous());
  reader.read_into(e, view);
  EXPECT_EQ(big.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // Wrong shape or dtype: an error naming the file and the tensor.
  Tensor wrong = zeros({3, 2});
  try {
    reader.read_into(e, wrong);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("tensor 'w' is float32 (2, 3) but it is read into float32 (3, 2)"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find(path), std::string::npos) << err.what();
  }
  Tensor wrong_dtype = zeros({2, 3}, DType::f64);
  EXPECT_THROW(reader.read_into(e, wrong_dtype), Error);
  fs::remove(path);
}

// A range of elements: only those bytes, into a (count,) destination (FSDP loads each rank's slice this way).
TEST(SafetensorsReader, ReadRangeIntoReadsASliceOfTheFlattenedTensor) {
  const std::string path = temp_file("r.safetensors");
  nn::save_safetensors(path, {{"a", from_vector<double>({9, 8})}, {"w", arange(0, 12, 1, DType::f32).reshape({3, 4})}});
  nn::SafetensorsReader reader(path);
  const auto& w = *reader.find("w");
  Tensor mid = zeros({5});
  reader.read_range_into(w, 3, 5, mid);
  EXPECT_EQ(mid.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7}));
  // Into a slice of a larger buffer (a shard), the rest untouched.
  Tensor shard = full({6}, -1.0);
  Tensor tail = shard.narrow(0, 4, 2);
  reader.read_range_into(w, 10, 2, tail);
  EXPECT_EQ(shard.to_vector<float>(), (std::vector<float>{-1, -1, -1, -1, 10, 11}));
  // A strided destination goes through one temporary; an empty range reads nothing.
  Tensor big = zeros({4});
  Tensor every_other = big.slice(0, 0, 4, 2);
  reader.read_range_into(w, 0, 2, every_other);
  EXPECT_EQ(big.to_vector<float>(), (std::vector<float>{0, 0, 1, 0}));
  Tensor none = zeros({0});
  reader.read_range_into(w, 12, 0, none);
  Tensor first = zeros({1}, DType::f64);
  reader.read_range_into(*reader.find("a"), 1, 1, first);
  EXPECT_EQ(first.to_vector<double>(), (std::vector<double>{8}));
  Tensor two = zeros({2});
  VOLT_EXPECT_ERROR(reader.read_range_into(w, 11, 2, two), "elements [11, 13) of tensor 'w' requested, but it holds 12",
                    path.c_str());
  VOLT_EXPECT_ERROR(reader.read_range_into(w, -1, 2, two), "elements [-1, 1) of tensor 'w'");
  Tensor wrong_dtype = zeros({2}, DType::f64);
  VOLT_EXPECT_ERROR(reader.read_range_into(w, 0, 2, wrong_dtype), "2 elements of tensor 'w' (float32) are read into float64 (2,)",
                    "expected a (2,) float32 tensor");
  Tensor wrong_size = zeros({3});
  VOLT_EXPECT_ERROR(reader.read_range_into(w, 0, 2, wrong_size), "are read into float32 (3,)");
  fs::remove(path);
}

TEST(SafetensorsReader, OpeningChecksTheHeaderAsLoadSafetensors) {
  const std::string path = temp_file("c.safetensors");
  nn::save_safetensors(path, {{"w", zeros({4})}});
  fs::resize_file(path, fs::file_size(path) - 4);  // truncated data
  std::string load_msg, reader_msg;
  try {
    nn::load_safetensors(path);
  } catch (const Error& e) {
    load_msg = e.what();
  }
  try {
    nn::SafetensorsReader r(path);
  } catch (const Error& e) {
    reader_msg = e.what();
  }
  EXPECT_FALSE(load_msg.empty());
  EXPECT_EQ(reader_msg, load_msg);
  fs::remove(path);
}
