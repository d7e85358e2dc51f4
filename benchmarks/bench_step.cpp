// bench_step: the MNIST MLP training step (784-128-10, cross-entropy, Adam) in a hand-written loop, without
// the Trainer or a DataLoader: the floor the Trainer's own overhead is measured against. Prints one JSON line
// per batch size: {"bench":"step","batch_size":16,"us_per_step":...,"samples_per_s":...,"adam_us":...}.
#include <chrono>
#include <cstdio>

#include <volt/kernels/ops.h>
#include <volt/kernels/threads.h>
#include <volt/nn/nn.h>
#include <volt/nn/optim.h>

using namespace volt;

int main() {
  set_num_threads(1);
  for (int64_t batch : {16, 256}) {
    manual_seed(1);
    nn::Linear l1(784, 128), l2(128, 10);
    std::vector<Tensor> params = l1.parameters();
    for (auto& p : l2.parameters()) params.push_back(p);
    Tensor x = rand({batch, 784});
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % 10;
    Tensor y = from_vector<int64_t>(labels, {batch});
    optim::Adam opt(params, {.lr = 1e-3});
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = cross_entropy(l2(l1(x).relu()), y);
      loss.backward();
      opt.step();
    };
    for (int i = 0; i < 50; ++i) step();
    const int iters = batch == 16 ? 4000 : 1000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) step();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) opt.step();
    double so = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("{\"bench\":\"step\",\"model\":\"mlp\",\"batch_size\":%lld,\"us_per_step\":%.1f,\"samples_per_s\":%.0f,"
                "\"adam_us\":%.1f}\n",
                static_cast<long long>(batch), 1e6 * s / iters, static_cast<double>(batch) * iters / s, 1e6 * so / iters);
  }
  return 0;
}
