#include <volt/data/shared_dataset.h>

#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <volt/data/idx.h>
#include <volt/data/mnist.h>
#include <volt/distributed/shared_tensor.h>

namespace volt::data {

namespace fs = std::filesystem;

namespace {

// The shape in an IDX header, read without loading the data (gzread decompresses only the first block), so that
// every local rank knows the segment size before local rank 0 has read the file. read_idx validates the rest.
Shape read_idx_shape(const std::string& path, int expected_ndim) {
  gzFile f = gzopen(path.c_str(), "rb");  // zlib reads uncompressed files transparently
  VOLT_CHECK(f != nullptr, "load_mnist_normalized_shared: cannot open '", path, "': ", std::strerror(errno));
  uint8_t head[4 + 4 * 255];
  const int want = 4 + 4 * expected_ndim;
  const int got = gzread(f, head, static_cast<unsigned>(want));
  gzclose(f);
  VOLT_CHECK(got == want, "load_mnist_normalized_shared: '", path, "' is too short for an IDX header with ",
             expected_ndim, " dimensions (", want, " bytes, got ", got, ")");
  VOLT_CHECK(head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] == expected_ndim,
             "load_mnist_normalized_shared: '", path, "' is not an unsigned-byte IDX file with ", expected_ndim,
             " dimensions (magic bytes ", int(head[0]), " ", int(head[1]), " ", int(head[2]), " ", int(head[3]), ")");
  Shape s;
  for (int d = 0; d < expected_ndim; ++d) {
    const uint8_t* p = head + 4 + 4 * d;
    s.push_back((int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | int64_t{p[3]});
  }
  return s;
}

// FNV-1a: a stable 64-bit hash (std::hash is not guaranteed to agree between processes built differently).
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Identity of a file's current contents: absolute path, size and modification time. Two jobs never share a
// segment (the job id differs), but this keeps two files of one job (or one file rewritten) apart.
std::string file_key(const std::string& path, const std::string& extra) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  std::ostringstream key;  // (a stream: GCC 12 warns falsely (-Wrestrict) on "|" + std::string)
  key << (ec ? fs::path(path) : abs).lexically_normal().string() << '|' << fs::file_size(path, ec) << '|'
      << static_cast<long long>(fs::last_write_time(path, ec).time_since_epoch().count()) << '|' << extra;
  return hex(fnv1a(key.str()));
}

// "<pid>_<start time>" of rank 0, the same on every rank: unique among jobs running at the same time (a pid is
// unique on rank 0's node while it runs, and the time separates pid reuse across nodes). NCCL groups only
// move device tensors, so the broadcast goes through this rank's GPU there.
std::string job_id(dist::ProcessGroup& group) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  Tensor id = from_vector<int64_t>(
      {static_cast<int64_t>(getpid()), std::chrono::duration_cast<std::chrono::microseconds>(now).count()}, {2});
  if (group.backend_name() == "nccl") {
    Tensor d = id.to(group.device());
    group.broadcast(d, 0);
    id = d.cpu();
  } else {
    group.broadcast(id, 0);
  }
  std::vector<int64_t> v = id.to_vector<int64_t>();
  return std::to_string(v[0]) + "_" + hex(static_cast<uint64_t>(v[1]));
}

}  // namespace

bool node_sharing_available() {
  return dist::is_initialized() && dist::default_group().local_world_size() > 1;
}

std::string shared_mnist_prefix(int64_t rank0_pid) { return "mnist_" + std::to_string(rank0_pid) + "_"; }

std::shared_ptr<TensorDataset> load_mnist_normalized_shared(const std::string& dir, bool train, double mean,
                                                            double std, dist::ProcessGroup& group) {
  VOLT_CHECK(std > 0, "load_mnist_normalized_shared: std must be positive, got ", std);
  const MnistFiles f = find_mnist_files(dir, train);
  // Every rank reads the headers, so size errors are raised everywhere before any collective starts.
  const Shape img = read_idx_shape(f.images, 3);  // (N, rows, cols)
  const Shape lbl = read_idx_shape(f.labels, 1);  // (N)
  VOLT_CHECK(img[0] == lbl[0], "MnistDataset::load: '", f.images, "' holds ", img[0], " images but '", f.labels,
             "' holds ", lbl[0], " labels; the counts must agree");
  const std::string job = job_id(group);
  const std::string base = "mnist_" + job + "_";  // shared_mnist_prefix(pid) + "<time>_"
  char stats[64];
  std::snprintf(stats, sizeof stats, "%.17g,%.17g", mean, std);

  const Shape x_shape{img[0], 1, img[1], img[2]};
  Tensor images = dist::SharedTensor::create_or_attach(
      base + file_key(f.images, stats) + "_x", x_shape, DType::f32, group, [&](Tensor& out) {
        Tensor raw = read_idx(f.images, 3);
        VOLT_CHECK(raw.shape() == img, "load_mnist_normalized_shared: '", f.images, "' changed while loading");
        const uint8_t* s = raw.data<uint8_t>();
        float* d = out.data<float>();
        // The same float operations, in the same order, as to_float followed by normalize, so the values are
        // bit-identical to the single-process path (without its intermediate f32 copy).
        const float m = static_cast<float>(mean), sd = static_cast<float>(std);
        const int64_t n = raw.numel();
        for (int64_t i = 0; i < n; ++i) d[i] = (static_cast<float>(s[i]) / 255.0f - m) / sd;
      });
  Tensor labels = dist::SharedTensor::create_or_attach(
      base + file_key(f.labels, "") + "_y", Shape{lbl[0]}, DType::i64, group, [&](Tensor& out) {
        Tensor raw = read_idx(f.labels, 1);
        VOLT_CHECK(raw.shape() == lbl, "load_mnist_normalized_shared: '", f.labels, "' changed while loading");
        const uint8_t* s = raw.data<uint8_t>();
        int64_t* d = out.data<int64_t>();
        for (int64_t i = 0; i < lbl[0]; ++i) d[i] = s[i];
      });
  return std::make_shared<TensorDataset>(std::move(images), std::move(labels));
}

}  // namespace volt::data
