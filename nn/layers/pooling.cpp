#include <volt/nn/layers/pooling.h>

namespace volt::nn {

namespace {
void check_pool(int64_t k, int64_t s, int64_t p, const char* name) {
  VOLT_CHECK(k > 0 && s >= 0 && p >= 0, name, ": expected kernel_size > 0, stride >= 0, padding >= 0, got ", k, ", ",
             s, ", ", p);
}
std::string pool_repr(int64_t k, int64_t s, int64_t p) {
  return "kernel_size=" + std::to_string(k) + ", stride=" + std::to_string(s) + ", padding=" + std::to_string(p);
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t k, int64_t s, int64_t p) : kernel_size(k), stride(s == 0 ? k : s), padding(p) {
  check_pool(k, s, p, "MaxPool2d");
}
Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, {kernel_size, kernel_size}, {stride, stride}, {padding, padding});
}
std::string MaxPool2d::extra_repr() const { return pool_repr(kernel_size, stride, padding); }

AvgPool2d::AvgPool2d(int64_t k, int64_t s, int64_t p) : kernel_size(k), stride(s == 0 ? k : s), padding(p) {
  check_pool(k, s, p, "AvgPool2d");
}
Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, {kernel_size, kernel_size}, {stride, stride}, {padding, padding});
}
std::string AvgPool2d::extra_repr() const { return pool_repr(kernel_size, stride, padding); }

}  // namespace volt::nn
