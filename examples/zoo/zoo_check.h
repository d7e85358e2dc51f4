#pragma once
// Shared pieces of the model zoo (examples/zoo/, docs/zoo.md): a small command line, the Trainer options of a zoo
// run, a record of the training losses, and the two checks every zoo program makes with --check:
//   * the loss falls: the mean of the last k training losses is at most `ratio` times the mean of the first k;
//   * the gradients are right: autograd's gradient of a scalar loss with respect to a few elements of a few named
//     parameters equals the central finite difference (L(p + h) - L(p - h)) / 2h of the same loss, evaluated on
//     a copy of the model in f64 (tolerances stated by the caller).
// Each check prints one line and returns whether it passed; main() turns a failure into exit status 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <volt/kernels/grad.h>
#include <volt/nn/module.h>
#include <volt/trainer/trainer.h>

namespace volt::zoo {

struct Args {
  int64_t steps = 0;                // optimizer steps (--steps)
  std::string accelerator = "cpu";  // --accelerator cpu | gpu
  bool check = false;               // --check: run the finite-difference check and assert the loss fell
  uint64_t seed = 0;                // --seed
  std::string data;                 // --data PATH: the data file of a program that reads one (zoo_lstm_lm's corpus)
};

// --steps N, --accelerator cpu|gpu, --seed N, --data PATH, --check. Exits with status 2 and a message on anything
// else.
inline Args parse_args(int argc, char** argv, const char* name, int64_t default_steps) {
  Args a;
  a.steps = default_steps;
  auto usage = [&](const std::string& why) {
    std::cerr << name << ": " << why << "\nusage: " << name
              << " [--steps N] [--accelerator cpu|gpu] [--seed N] [--data PATH] [--check]\n";
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(f + " needs a value");
      return argv[++i];
    };
    auto integer = [&](const std::string& v) {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0) usage(f + ": expected a non-negative integer, got '" + v + "'");
      return static_cast<int64_t>(n);
    };
    if (f == "--steps") {
      a.steps = integer(value());
      if (a.steps < 1) usage("--steps must be at least 1");
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(integer(value()));
    } else if (f == "--accelerator") {
      a.accelerator = value();
      if (a.accelerator != "cpu" && a.accelerator != "gpu" && a.accelerator != "cuda")
        usage("--accelerator: expected cpu or gpu, got '" + a.accelerator + "'");
    } else if (f == "--data") {
      a.data = value();
    } else if (f == "--check") {
      a.check = true;
    } else {
      usage("unknown argument '" + f + "'");
    }
  }
  return a;
}

// A quiet Trainer run of `steps` optimizer steps on one device: no progress bar, summary, logger or checkpoint.
inline TrainerOptions trainer_options(const Args& a) {
  TrainerOptions o;
  o.accelerator = a.accelerator;
  o.devices = "1";
  o.max_steps = a.steps;
  o.num_sanity_val_steps = 0;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  o.seed = static_cast<int64_t>(a.seed);
  return o;
}

// The training losses of a run, kept detached on their device and read once at the end.
struct LossCurve {
  std::vector<Tensor> losses;
  void record(const Tensor& loss) { losses.push_back(loss.detach()); }
  // Mean of losses [begin, end).
  double mean_of(size_t begin, size_t end) const {
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += losses[i].item();
    return s / static_cast<double>(end - begin);
  }
};

// Passes when `after` <= ratio * `before` (a quantity that training should shrink).
inline bool check_fell(const std::string& name, const std::string& what, double before, double after, double ratio) {
  const bool ok = std::isfinite(after) && after <= ratio * before;
  std::printf("%s: %s %.4f -> %.4f, required <= %.2f x before: %s\n", name.c_str(), what.c_str(), before, after, ratio,
              ok ? "ok" : "FAILED");
  return ok;
}

// Passes when mean(last k losses) <= ratio * mean(first k losses).
inline bool check_loss_fell(const std::string& name, const LossCurve& curve, size_t k, double ratio) {
  const size_t n = curve.losses.size();
  if (n < 2 * k) {
    std::printf("%s: loss check FAILED: %zu losses recorded, need at least %zu\n", name.c_str(), n, 2 * k);
    return false;
  }
  return check_fell(name,
                    std::to_string(n) + " steps, loss (mean of the first " + std::to_string(k) +
                        " -> mean of the last " + std::to_string(k) + ")",
                    curve.mean_of(0, k), curve.mean_of(n - k, n), ratio);
}

struct GradCheckOptions {
  int64_t per_parameter = 3;        // elements checked per named parameter, spread over the tensor
  double h = 1e-6;                  // central-difference step (ReLU networks: smaller, so fewer kinks fall inside it)
  double rtol = 1e-5, atol = 1e-8;  // |autograd - fd| <= atol + rtol * max(|autograd|, |fd|)
};

// Compares autograd's gradient of loss_fn() with respect to the named parameters of `m` with central finite
// differences of loss_fn(), element by element. loss_fn must be deterministic (fixed inputs and noise) and
// return a one-element tensor; it runs with gradient recording on (it may itself call autograd::grad).
inline bool check_gradients(const std::string& name, nn::Module& m, const std::vector<std::string>& param_names,
                            const std::function<Tensor()>& loss_fn, GradCheckOptions o = {}) {
  std::vector<Tensor> params;
  for (const std::string& pn : param_names) {
    bool found = false;
    for (auto& [n, p] : m.named_parameters())
      if (n == pn) {
        params.push_back(p);
        found = true;
      }
    VOLT_CHECK(found, name, ": check_gradients: no parameter named '", pn, "'");
  }
  const std::vector<Tensor> grads = autograd::grad({loss_fn()}, params);
  double worst = 0;  // largest |autograd - fd| / (atol + rtol * scale)
  int checked = 0;
  bool ok = true;
  for (size_t j = 0; j < params.size(); ++j) {
    Tensor flat = params[j].detach().reshape({-1});
    const std::vector<double> g = grads[j].reshape({-1}).to_vector<double>();
    const int64_t n = flat.numel(), k = std::min<int64_t>(o.per_parameter, n);
    for (int64_t e = 0; e < k; ++e) {
      const int64_t i = k == 1 ? n / 2 : e * (n - 1) / (k - 1);  // first, last and evenly between
      Tensor elem = flat.narrow(0, i, 1);
      const double p0 = elem.item();
      elem.fill_(p0 + o.h);
      const double up = loss_fn().item();
      elem.fill_(p0 - o.h);
      const double down = loss_fn().item();
      elem.fill_(p0);
      const double fd = (up - down) / (2 * o.h), ad = g[static_cast<size_t>(i)];
      const double bound = o.atol + o.rtol * std::max(std::abs(ad), std::abs(fd));
      worst = std::max(worst, std::abs(ad - fd) / bound);
      ++checked;
      if (!(std::abs(ad - fd) <= bound)) {
        ok = false;
        std::printf("%s: gradient of %s[%lld]: autograd %.10g, finite difference %.10g\n", name.c_str(),
                    param_names[j].c_str(), static_cast<long long>(i), ad, fd);
      }
    }
  }
  std::printf(
      "%s: %d gradient elements of %zu parameters vs central differences (h %.0e, rtol %.0e, atol %.0e), "
      "worst error %.3f of the tolerance: %s\n",
      name.c_str(), checked, params.size(), o.h, o.rtol, o.atol, worst, ok ? "ok" : "FAILED");
  return ok;
}

// Prints and returns whether |a - b| <= atol + rtol * max(|a|, |b|) for every element pair.
inline bool check_close(const std::string& what, const std::vector<double>& a, const std::vector<double>& b,
                        double rtol, double atol) {
  double worst = 0;
  bool ok = a.size() == b.size();
  for (size_t i = 0; ok && i < a.size(); ++i) {
    const double bound = atol + rtol * std::max(std::abs(a[i]), std::abs(b[i]));
    worst = std::max(worst, std::abs(a[i] - b[i]) / bound);
    if (!(std::abs(a[i] - b[i]) <= bound)) ok = false;
  }
  std::printf("%s: %zu values, worst error %.3f of the tolerance (rtol %.0e, atol %.0e): %s\n", what.c_str(), a.size(),
              worst, rtol, atol, ok ? "ok" : "FAILED");
  return ok;
}

// main() of a zoo program: runs `body` (which returns whether every check passed), prints the wall time, and turns
// an exception into a message and exit status 1.
inline int run(const char* name, const std::function<bool()>& body) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const bool ok = body();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %s in %.1f s\n", name, ok ? "done" : "CHECKS FAILED", s);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace volt::zoo
