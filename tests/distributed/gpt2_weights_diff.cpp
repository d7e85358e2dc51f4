// gpt2_weights_diff A.safetensors B.safetensors: the largest absolute difference between two weight files with the
// same tensor names and shapes (compared in f64), printed as "largest weight difference D (tensor NAME)". Exits 0,
// or 1 with the reason when the files' names or shapes differ or one cannot be read. check_gpt2_ddp.sh uses it
// (no numpy needed).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <volt/kernels/ops.h>
#include <volt/nn/serialization.h>

int main(int argc, char** argv) {
  using namespace volt;
  if (argc != 3) {
    std::cerr << "usage: gpt2_weights_diff A.safetensors B.safetensors\n";
    return 2;
  }
  try {
    std::map<std::string, Tensor> a, b;
    for (auto& [n, t] : nn::load_safetensors(argv[1])) a[n] = t;
    for (auto& [n, t] : nn::load_safetensors(argv[2])) b[n] = t;
    double worst = 0;
    std::string where = "none";
    for (const auto& [name, t] : a) {
      auto it = b.find(name);
      VOLT_CHECK(it != b.end(), "tensor '", name, "' is in ", argv[1], " but not in ", argv[2]);
      VOLT_CHECK(it->second.shape() == t.shape(), "tensor '", name, "' is ", t.shape_str(), " in ", argv[1], " and ",
                 it->second.shape_str(), " in ", argv[2]);
      const double d = max(abs(sub(t.to(DType::f64), it->second.to(DType::f64)))).item();
      VOLT_CHECK(std::isfinite(d), "tensor '", name, "' is not finite in one of the files");
      if (where == "none" || d > worst) {
        worst = d;
        where = name;
      }
    }
    VOLT_CHECK(a.size() == b.size(), argv[2], " has ", b.size(), " tensors, ", argv[1], " ", a.size());
    std::printf("largest weight difference %.3g (tensor %s)\n", worst, where.c_str());
  } catch (const std::exception& e) {
    std::cerr << "gpt2_weights_diff: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
