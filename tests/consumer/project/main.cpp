// Exercises Volt through its public headers only: builds tensors, runs ops with autograd, and prints a line
// that tests/consumer/run_consumer.cmake checks. Exits nonzero if a value is wrong.
#include <cstdio>

#include <volt/tensor.h>  // tensors, ops, autograd, devices, <volt/config.h>

int main() {
  using namespace volt;
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor table = from_vector<double>({10, 20, 30}, {3, 1});
  // y = sum(x^2) + sum(cat([x, x]) * 0.5) + sum(embedding(table, [2, 0])) = 91 + 21 + 40
  Tensor y = (x * x).sum() + (cat({x, x}, 0) * 0.5).sum() +
             embedding(table, from_vector<int64_t>({2, 0})).sum();
  y.backward();
  // dy/dx = 2x + 1, summed: 2 * 21 + 6 = 48
  const double value = y.item(), grad_sum = x.grad().sum().item();
  std::printf("volt-consumer: y=%g grad_sum=%g cuda_built=%d cuda_available=%d\n", value, grad_sum,
              static_cast<int>(cuda_built()), static_cast<int>(cuda_available()));
  const bool ok = value == 152.0 && grad_sum == 48.0 && cuda_built() == (VOLT_WITH_CUDA != 0);
  std::printf(ok ? "volt-consumer: ok\n" : "volt-consumer: WRONG VALUES\n");
  return ok ? 0 : 1;
}
