// Links volt::runtime and nothing above it: the runtime layer (storage, allocators, dtypes, devices, errors)
// is a library of its own, with no call into kernels/. Exits nonzero when a value is wrong.
#include <cstdio>
#include <cstring>
#include <string>

#include <volt/runtime/dtype.h>
#include <volt/runtime/error.h>
#include <volt/runtime/storage.h>

int main() {
  using namespace volt;
  auto s = Storage::create(kCPU, 64);
  std::memset(s->data.get(), 7, s->nbytes);
  const bool storage_ok = s->nbytes == 64 && static_cast<unsigned char*>(s->data.get())[63] == 7;
  const bool dtype_ok = parse_dtype("bfloat16") == DType::bf16 && itemsize(DType::f16) == 2 &&
                        promote_types(DType::i64, DType::f32) == DType::f32;
  bool error_ok = false;
  try {
    parse_dtype("float7");
  } catch (const Error& e) {
    error_ok = std::string(e.what()).find("float7") != std::string::npos;
  }
  std::printf("runtime alone: storage %d dtype %d error %d\n", storage_ok, dtype_ok, error_ok);
  return storage_ok && dtype_ok && error_ok ? 0 : 1;
}
