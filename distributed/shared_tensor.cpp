#include <volt/distributed/shared_tensor.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace volt::dist {
namespace {

// The segment starts with a small header so that attaching ranks can tell a filled segment from a failed one.
struct Header {
  uint64_t magic;
  uint64_t status;  // 0 = being filled, 1 = ready, 2 = fill failed
  uint64_t nbytes;
  uint64_t pad[5];
};
constexpr uint64_t kMagic = 0x564f4c54534d454dull;  // "VOLTSMEM"
constexpr size_t kHeader = sizeof(Header);          // 64: keeps the data 64-byte aligned

std::string errno_text() { return std::strerror(errno); }

Tensor tensor_over(void* base, size_t map_bytes, const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>();
  storage->data = std::shared_ptr<void>(static_cast<char*>(base) + kHeader,
                                        [base, map_bytes](void*) { munmap(base, map_bytes); });
  storage->nbytes = map_bytes - kHeader;
  storage->device = kCPU;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

}  // namespace

std::string SharedTensor::segment_name(const std::string& name) {
  VOLT_CHECK(!name.empty() && name.size() < 200 && name.find('/') == std::string::npos,
             "SharedTensor: name '", name, "' must be non-empty, shorter than 200 characters and contain no '/'");
  return "/volt_" + name;
}

Tensor SharedTensor::create_or_attach(const std::string& name, const Shape& shape, DType dtype, int local_rank,
                                      const std::function<void()>& local_barrier, const FillFn& fill) {
  std::string seg = segment_name(name);
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * itemsize(dtype);
  size_t map_bytes = kHeader + nbytes;
  if (local_rank == 0) {
    shm_unlink(seg.c_str());  // a stale segment of a crashed run with the same name
    int fd = shm_open(seg.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    VOLT_CHECK(fd >= 0, "SharedTensor::create_or_attach: shm_open('", seg, "') failed: ", errno_text());
    if (ftruncate(fd, static_cast<off_t>(map_bytes)) != 0) {
      std::string e = errno_text();
      close(fd);
      shm_unlink(seg.c_str());
      VOLT_FAIL("SharedTensor::create_or_attach: ftruncate of '", seg, "' to ", map_bytes, " bytes failed: ", e,
                " (is /dev/shm large enough?)");
    }
    void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      shm_unlink(seg.c_str());
      VOLT_FAIL("SharedTensor::create_or_attach: mmap of '", seg, "' failed: ", errno_text());
    }
    auto* h = static_cast<Header*>(base);
    *h = Header{kMagic, 0, nbytes, {}};
    Tensor t = tensor_over(base, map_bytes, shape, dtype);
    std::string fill_error;
    try {
      if (fill) fill(t);
      h->status = 1;
    } catch (const std::exception& e) {
      h->status = 2;
      fill_error = e.what();
    }
    local_barrier();  // segment ready (or failed)
    local_barrier();  // everyone has mapped it: the name can go
    shm_unlink(seg.c_str());
    VOLT_CHECK(fill_error.empty(), "SharedTensor::create_or_attach('", name, "'): fill failed on local rank 0: ",
               fill_error);
    return t;
  }
  local_barrier();
  int fd = shm_open(seg.c_str(), O_RDONLY, 0);
  std::string open_error = fd < 0 ? errno_text() : "";
  void* base = fd < 0 ? MAP_FAILED : mmap(nullptr, map_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  local_barrier();
  VOLT_CHECK(fd >= 0, "SharedTensor::create_or_attach: local rank ", local_rank, " could not open '", seg,
             "': ", open_error, " (did local rank 0 call create_or_attach with the same name?)");
  VOLT_CHECK(base != MAP_FAILED, "SharedTensor::create_or_attach: mmap of '", seg, "' failed: ", errno_text());
  const auto* h = static_cast<const Header*>(base);
  if (h->magic != kMagic || h->nbytes != nbytes || h->status != 1) {
    uint64_t status = h->status, got = h->nbytes;
    bool magic = h->magic == kMagic;
    munmap(base, map_bytes);
    VOLT_CHECK(magic, "SharedTensor::create_or_attach: '", seg, "' is not a Volt shared tensor");
    VOLT_CHECK(status != 2, "SharedTensor::create_or_attach('", name, "'): fill failed on local rank 0");
    VOLT_CHECK(got == nbytes, "SharedTensor::create_or_attach('", name, "'): local rank 0 created ", got,
               " bytes but this rank expects ", nbytes, " (shape ", shape_to_string(shape), ", dtype ",
               dtype_name(dtype), "); every local rank must pass the same shape and dtype");
    VOLT_FAIL("SharedTensor::create_or_attach('", name, "'): segment is not ready (status ", status, ")");
  }
  return tensor_over(base, map_bytes, shape, dtype);
}

}  // namespace volt::dist
