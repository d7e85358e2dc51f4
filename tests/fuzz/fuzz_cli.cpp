// libFuzzer target: the examples' command line (examples::parse_args). The input is split on NUL bytes into
// argv[1..]. CLI11 reports bad flags as CLI::ParseError, which parse_args turns into an exit code; nothing may
// escape it. The help and error text CLI11 prints goes to a discarding stream buffer.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

#include "examples/example_common.h"

namespace {
struct NullBuf : std::streambuf {
  int overflow(int c) override { return c == EOF ? 0 : c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static NullBuf null;
  std::cout.rdbuf(&null);
  std::cerr.rdbuf(&null);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"fuzz_cli"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (size) args.push_back(cur);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  volt::examples::Args a;
  int exit_code = -1;
  const bool ok = volt::examples::parse_args(static_cast<int>(args.size()), argv.data(), "fuzz", a, exit_code);
  if (!ok && exit_code == -1) std::abort();  // a false return must set the exit code
  // The validators promise these.
  if (ok && (a.epochs <= 0 || a.batch_size <= 0 || !(a.lr > 0) || !std::isfinite(a.lr) || a.num_workers < 0))
    std::abort();
  return 0;
}
