// MnistDataModule under a default process group: the normalized tensors are loaded once per node into shared
// memory (local rank 0 reads, the others map read-only) and every rank sees the same data and splits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/gradcheck.h"
#include <volt/data/data_loader.h>
#include <volt/data/data_module.h>
#include <volt/data/idx.h>
#include <volt/data/mnist.h>
#include <volt/data/shared_dataset.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {
dist::ProcessGroup& pg() { return dist::default_group(); }

int64_t rank0_pid() {
  Tensor pid = scalar_tensor(static_cast<double>(getpid()), DType::i64);
  pg().broadcast(pid, 0);
  return pid.item<int64_t>();
}

// Rank 0 writes a small MNIST-format directory (train gzip-compressed, test plain); the others wait for it.
// Pixel values cover 0..255 so every normalized value is exercised.
std::string write_tiny_mnist(const std::string& tag, int64_t n_train, int64_t n_test, bool truncate_train = false) {
  std::string dir = (fs::temp_directory_path() / ("volt_shm_ds_" + tag + "_" + std::to_string(rank0_pid())))
                        .string();
  if (pg().rank() == 0) {
    fs::create_directories(dir);
    auto write = [&](const char* prefix, int64_t n, bool gz) {
      Tensor img = empty({n, 4, 5}, DType::u8), lbl = empty({n}, DType::u8);
      for (int64_t i = 0; i < n * 20; ++i) img.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
      for (int64_t i = 0; i < n; ++i) lbl.data<uint8_t>()[i] = static_cast<uint8_t>((i * 7) % 10);
      std::string sfx = gz ? ".gz" : "";
      data::write_idx(dir + "/" + prefix + "-images-idx3-ubyte" + sfx, img, gz);
      data::write_idx(dir + "/" + prefix + "-labels-idx1-ubyte" + sfx, lbl, gz);
    };
    write("train", n_train, true);
    write("t10k", n_test, false);
    if (truncate_train) {  // keep the header, drop the pixels: read_idx fails on local rank 0 only
      std::string p = dir + "/train-images-idx3-ubyte.gz";
      fs::remove(p);
      Tensor img = empty({n_train, 4, 5}, DType::u8);
      data::write_idx(dir + "/train-images-idx3-ubyte", img, false);
      fs::resize_file(dir + "/train-images-idx3-ubyte", 16 + 7);
    }
  }
  pg().barrier();
  return dir;
}

void remove_dir(const std::string& dir) {
  pg().barrier();
  if (pg().rank() == 0) fs::remove_all(dir);
}

// The /proc/self/maps line of the mapping holding `p` ("" if none).
std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) return line;
  }
  return "";
}

// Entries of /dev/shm whose name starts with `prefix`.
int count_segments(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

const data::TensorDataset& base_of(const std::shared_ptr<data::Dataset>& ds) {
  auto sub = std::dynamic_pointer_cast<data::Subset>(ds);
  EXPECT_NE(sub, nullptr);
  auto base = std::dynamic_pointer_cast<const data::TensorDataset>(sub->base());
  EXPECT_NE(base, nullptr);
  return *base;
}

// Every rank's copy of `t` equals rank 0's, bit for bit.
void expect_same_on_every_rank(const Tensor& t, const char* what) {
  Tensor all = pg().all_gather(t.contiguous());
  for (int r = 1; r < pg().world_size(); ++r)
    EXPECT_EQ(std::memcmp(all.select(0, r).contiguous().data_ptr(), all.select(0, 0).contiguous().data_ptr(),
                          t.numel() * itemsize(t.dtype())),
              0)
        << what << " differs between rank 0 and rank " << r;
}
}  // namespace

TEST(SharedDataset, MnistDataModuleLoadsOncePerNodeAndAgreesEverywhere) {
  const int64_t pid = rank0_pid();
  std::string dir = write_tiny_mnist("ok", 24, 10);
  const bool multi = pg().local_world_size() > 1;
  EXPECT_EQ(data::node_sharing_available(), multi);

  data::MnistDataModule dm(dir, /*batch_size=*/4, 0, /*seed=*/7);
  dm.setup("fit");
  dm.setup("test");
  EXPECT_EQ(dm.shared(), multi);
  ASSERT_EQ(dm.train_dataset()->size(), 22);
  ASSERT_EQ(dm.val_dataset()->size(), 2);
  ASSERT_EQ(dm.test_dataset()->size(), 10);

  // Same values as the single-process path, bit for bit.
  const auto& train = base_of(dm.train_dataset());
  auto ref = data::MnistDataset::load(dir, true)->normalized(data::MnistDataModule::kMean,
                                                            data::MnistDataModule::kStd);
  ASSERT_EQ(train.inputs().shape(), (Shape{24, 1, 4, 5}));
  ASSERT_EQ(train.inputs().dtype(), DType::f32);
  EXPECT_EQ(std::memcmp(train.inputs().data_ptr(), ref->inputs().data_ptr(), 24 * 20 * sizeof(float)), 0);
  EXPECT_EQ(train.targets().to_vector<int64_t>(), ref->targets().to_vector<int64_t>());
  auto test_ds = std::dynamic_pointer_cast<data::TensorDataset>(dm.test_dataset());
  ASSERT_NE(test_ds, nullptr);
  auto ref_test = data::MnistDataset::load(dir, false)->normalized(data::MnistDataModule::kMean,
                                                                  data::MnistDataModule::kStd);
  EXPECT_EQ(test_ds->inputs().to_vector<float>(), ref_test->inputs().to_vector<float>());
  EXPECT_EQ(test_ds->targets().to_vector<int64_t>(), ref_test->targets().to_vector<int64_t>());

  // Identical tensors and splits on every rank.
  expect_same_on_every_rank(train.inputs(), "train images");
  expect_same_on_every_rank(train.targets(), "train labels");
  expect_same_on_every_rank(test_ds->inputs(), "test images");
  auto idx = [](const std::shared_ptr<data::Dataset>& ds) {
    const auto& v = std::dynamic_pointer_cast<data::Subset>(ds)->indices();
    return from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
  };
  expect_same_on_every_rank(idx(dm.train_dataset()), "train split");
  expect_same_on_every_rank(idx(dm.val_dataset()), "val split");

  // Shared memory: one segment mapped by every local rank, writable only on local rank 0.
  for (const Tensor* t : {&train.inputs(), &train.targets(), &test_ds->inputs()}) {
    std::string map = mapping_of(t->data_ptr());
    if (multi) {
      EXPECT_NE(map.find("/dev/shm/volt_mnist_" + std::to_string(pid) + "_"), std::string::npos) << map;
      const std::string perms = pg().local_rank() == 0 ? " rw-s " : " r--s ";
      EXPECT_NE(map.find(perms), std::string::npos) << "local rank " << pg().local_rank() << ": " << map;
    } else {
      EXPECT_EQ(map.find("/dev/shm/"), std::string::npos) << map;
    }
  }

  // Loaders gather from the read-only mapping; every rank draws the same batches from the same seed.
  auto loader = dm.train_dataloader();
  int64_t seen = 0;
  for (const auto& b : *loader) {
    EXPECT_EQ(b.input.size(1), 1);
    expect_same_on_every_rank(b.input, "train batch");
    seen += b.input.size(0);
  }
  EXPECT_EQ(seen, 22);

  // Every name was unlinked once mapped: nothing of this job is left in /dev/shm.
  pg().barrier();
  EXPECT_EQ(count_segments("volt_" + data::shared_mnist_prefix(pid)), 0);
  remove_dir(dir);
}

TEST(SharedDataset, SharingCanBeTurnedOff) {
  std::string dir = write_tiny_mnist("off", 12, 3);
  data::MnistDataModule dm(dir, 4);
  dm.set_share_across_local_ranks(false);
  dm.setup("");
  EXPECT_FALSE(dm.shared());
  const auto& train = base_of(dm.train_dataset());
  EXPECT_EQ(mapping_of(train.inputs().data_ptr()).find("/dev/shm/"), std::string::npos);
  expect_same_on_every_rank(train.inputs(), "unshared train images");
  remove_dir(dir);
}

TEST(SharedDataset, ReadFailureOnLocalRankZeroFailsEveryRank) {
  const int64_t pid = rank0_pid();
  std::string dir = write_tiny_mnist("bad", 12, 3, /*truncate_train=*/true);
  data::MnistDataModule dm(dir, 4);
  if (pg().local_world_size() > 1) {
    // Only local rank 0 reads the pixels; the others learn of the failure through the segment header.
    VOLT_EXPECT_ERROR(dm.setup("fit"), "fill failed");
  } else {
    VOLT_EXPECT_ERROR(dm.setup("fit"), "truncated");
  }
  EXPECT_EQ(dm.train_dataset(), nullptr);
  pg().barrier();
  EXPECT_EQ(count_segments("volt_" + data::shared_mnist_prefix(pid)), 0);
  remove_dir(dir);
}
