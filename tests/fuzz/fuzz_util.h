#pragma once
// Shared pieces of the libFuzzer targets: a per-process scratch file for the readers that take a path, and a
// checksum that reads every byte of a returned tensor (so that a tensor whose storage is smaller than its
// shape claims is caught by AddressSanitizer).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <volt/kernels/tensor.h>

namespace volt::fuzz {

// The fuzz input as a file. libFuzzer runs one input at a time per process, so one path per process suffices.
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  struct ScratchFile {
    std::string path;
    ~ScratchFile() { std::remove(path.c_str()); }
  };
  static const ScratchFile file{(std::filesystem::temp_directory_path() /
                                 ("volt_fuzz_" + std::to_string(::getpid()) + suffix)).string()};
  const std::string& path = file.path;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

inline uint64_t touch(const Tensor& t) {
  uint64_t h = 0;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  const size_t n = t.nbytes();
  for (size_t i = 0; i < n; ++i) h = h * 31 + p[i];
  return h;
}

}  // namespace volt::fuzz
