// The op table's harness (see op_table.h): every row x device x dtype as its own test case,
//   OpTable/OpTableTest.Forward/<row>_<device>_<dtype>
//   OpTable/OpTableGradTest.Backward/<row>_<device>_<dtype>         (differentiable rows)
//   OpTable/OpTableGradcheck.FiniteDifferences/<row>                 (differentiable rows, CPU f64)
//   OpTable/OpTableDoubleBackward.FiniteDifferences/<row>            (the same rows: second derivatives)
// CUDA cases are always registered; without a GPU they skip with the reason.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "kernels/op_table/op_table.h"
#include "common/second_order.h"
#include <volt/runtime/cuda_api.h>

namespace volt::optable {

std::vector<OpRow>& registry() {
  static std::vector<OpRow> rows;
  return rows;
}

namespace {

struct Case {
  const OpRow* row = nullptr;
  Device device = kCPU;
  DType dtype = DType::f32;
};

const char* short_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::boolean: return "bool";
  }
  return "?";
}

// Printed in test listings (and CTest's names): "exp on cpu in f16".
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.row->name << " on " << c.device.str() << " in " << short_name(c.dtype);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string dev = c.device.is_cpu() ? "cpu" : "cuda" + std::to_string(c.device.index);
  return c.row->name + "_" + dev + "_" + short_name(c.dtype);
}

std::vector<Device> devices() {
  std::vector<Device> d{kCPU, cuda_device(0)};  // cuda0 always, so CPU-only hosts list it as skipped
  for (int i = 1; i < cuda_device_count(); ++i) d.push_back(cuda_device(i));
  return d;
}

void check_registry() {
  std::set<std::string> seen;
  for (const OpRow& r : registry()) {
    if (!seen.insert(r.name).second) ADD_FAILURE() << "op table: duplicate row name " << r.name;
  }
}

std::vector<Case> all_cases(bool differentiable_only) {
  check_registry();
  std::vector<Case> out;
  for (const OpRow& r : registry()) {
    if (differentiable_only && !r.differentiable) continue;
    for (Device d : devices())
      for (DType dt : r.dtypes) out.push_back({&r, d, dt});
  }
  return out;
}

std::vector<Case> gradcheck_cases() {
  std::vector<Case> out;
  for (const OpRow& r : registry())
    if (r.differentiable && r.gradcheck) out.push_back({&r, kCPU, DType::f64});
  return out;
}

bool skip_reason(Device d, std::string* why) {
  if (d.is_cpu()) return false;
  if (!cuda_available()) {
    *why = "no CUDA device: " + cuda_status();
    return true;
  }
  if (d.index >= cuda_device_count()) {
    *why = "no CUDA device " + std::to_string(d.index);
    return true;
  }
  return false;
}

uint64_t name_seed(const std::string& s, size_t k) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same inputs on every platform
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h ^ (0x9e3779b97f4a7c15ull * (k + 1));
}

// The CPU base tensor of input k: f64 for floating kinds, i64 / bool otherwise.
Tensor make_base(const OpRow& r, size_t k) {
  const In& in = r.inputs[k];
  std::mt19937_64 rng(name_seed(r.name, k));
  const int64_t n = shape_numel(in.shape);
  std::vector<double> v(static_cast<size_t>(n));
  switch (in.kind) {
    case In::Kind::Uniform: {
      std::uniform_real_distribution<double> u(in.lo, in.hi);
      for (auto& x : v) x = u(rng);
      return from_vector<double>(v, in.shape);
    }
    case In::Kind::Distinct: {
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i - n / 2) * in.lo;
      std::shuffle(v.begin(), v.end(), rng);
      return from_vector<double>(v, in.shape);
    }
    case In::Kind::Discrete: {
      std::uniform_int_distribution<int> u(-2, 2);
      for (auto& x : v) x = 0.5 * u(rng);
      return from_vector<double>(v, in.shape);
    }
    case In::Kind::Index: {
      std::uniform_int_distribution<int64_t> u(0, in.limit - 1);
      std::vector<int64_t> iv(static_cast<size_t>(n));
      for (auto& x : iv) x = u(rng);
      return from_vector<int64_t>(iv, in.shape);
    }
    case In::Kind::Mask: {
      std::vector<uint8_t> bv(static_cast<size_t>(n));
      for (auto& x : bv) x = static_cast<uint8_t>(rng() & 1);
      return from_vector<uint8_t>(bv, in.shape).to(DType::boolean);
    }
    case In::Kind::Custom: return in.make();
  }
  return Tensor();
}

// The inputs of a case rounded to `dt` (floating ones), on the CPU.
Inputs rounded_inputs(const OpRow& r, DType dt) {
  Inputs out;
  for (size_t k = 0; k < r.inputs.size(); ++k) {
    Tensor b = make_base(r, k);
    out.push_back(is_floating(b.dtype()) ? b.to(dt) : b);
  }
  return out;
}

// Leaves on `device`; floating inputs converted to `dt` and, when `grad`, requiring grad.
Inputs leaves(const OpRow& r, const Inputs& rounded, Device device, DType dt, bool grad) {
  Inputs out;
  for (size_t k = 0; k < rounded.size(); ++k) {
    Tensor t = rounded[k];
    if (is_floating(t.dtype())) t = t.to(dt);
    t = t.to(device).detach().contiguous().clone();
    if (grad && r.differentiable && r.inputs[k].grad && is_floating(t.dtype())) t.set_requires_grad();
    out.push_back(t);
  }
  return out;
}

Tensor run(const OpRow& r, const Inputs& leaves_in, Ctx c) {
  Inputs in = leaves_in;
  for (size_t k = 0; k < in.size(); ++k)
    if (r.inputs[k].view_fn) in[k] = r.inputs[k].view_fn(in[k]);
  return r.fn(in, c);
}

// rtol, and atol relative to the reference's largest magnitude.
std::pair<double, double> tolerances(DType dt) {
  switch (dt) {
    case DType::f64: return {1e-10, 1e-12};
    case DType::f32: return {1e-5, 2e-6};
    case DType::f16: return {1e-2, 2e-3};
    case DType::bf16: return {2e-2, 8e-3};
    default: return {0, 0};
  }
}

// The less precise of two floating dtypes.
DType coarser(DType a, DType b) {
  auto rank = [](DType d) { return d == DType::bf16 ? 0 : d == DType::f16 ? 1 : d == DType::f32 ? 2 : 3; };
  if (!is_floating(a)) return b;
  if (!is_floating(b)) return a;
  return rank(a) <= rank(b) ? a : b;
}

// Compares `actual` with `ref`: exactly for integer / bool outputs and `exact`, else within the tolerance of
// `tol_dtype` times `k`; a half-type `actual` is compared with `ref` rounded to its dtype.
void expect_matches(const Tensor& actual, const Tensor& ref, DType tol_dtype, double k, bool exact,
                    const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << ": undefined";
  ASSERT_EQ(actual.shape(), ref.shape()) << what << ": shape " << actual.shape_str() << " vs reference "
                                         << ref.shape_str();
  Tensor r = ref.detach().cpu();
  if (actual.dtype() == DType::f16 || actual.dtype() == DType::bf16) r = r.to(actual.dtype());
  std::vector<double> a = actual.detach().to_vector<double>(), e = r.to_vector<double>();
  const bool exact_cmp = exact || !is_floating(actual.dtype());
  auto [rtol, atol_rel] = tolerances(coarser(tol_dtype, actual.dtype()));
  double scale = 0;
  for (double x : e) scale = std::max(scale, std::abs(x));
  const double atol = exact_cmp ? 0.0 : atol_rel * k * std::max(scale, 1e-3);
  const double rt = exact_cmp ? 0.0 : rtol * k;
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream first;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    const bool ok = (exact_cmp ? a[i] == e[i] : err <= atol + rt * std::abs(e[i])) && !std::isnan(a[i]);
    if (!ok && !(std::isnan(a[i]) && std::isnan(e[i]))) {
      if (bad < 5) first << "\n  [" << i << "] got " << a[i] << " expected " << e[i];
      ++bad;
    }
    if (!std::isnan(err)) worst = std::max(worst, err);
  }
  EXPECT_EQ(bad, 0) << what << " (" << dtype_name(actual.dtype()) << ", " << a.size()
                    << " elements): max error " << worst << ", atol " << atol << ", rtol " << rt << first.str();
}

class OpTableTest : public ::testing::TestWithParam<Case> {};
class OpTableGradTest : public ::testing::TestWithParam<Case> {};
class OpTableGradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(OpTableTest, Forward) {
  const Case& c = GetParam();
  const OpRow& r = *c.row;
  std::string why;
  if (skip_reason(c.device, &why)) GTEST_SKIP() << why;
  Inputs rounded = rounded_inputs(r, c.dtype);
  const DType ref_dt = r.same_dtype_ref ? c.dtype : DType::f64;
  Tensor out;
  {
    NoGradGuard ng;
    out = run(r, leaves(r, rounded, c.device, c.dtype, false), {c.device, c.dtype});
    ASSERT_EQ(out.device(), c.device) << "the output is not on the inputs' device";
    Tensor ref = run(r, leaves(r, rounded, kCPU, ref_dt, false), {kCPU, ref_dt});
    if (is_floating(out.dtype())) {
      const DType want = r.out_dtype ? *r.out_dtype : c.dtype;
      EXPECT_EQ(out.dtype(), want) << "output dtype";
    } else {
      EXPECT_EQ(out.dtype(), ref.dtype()) << "output dtype";
    }
    expect_matches(out, ref, c.dtype, r.fwd_tol, r.exact_, r.name + " forward vs the CPU " +
                   std::string(short_name(ref_dt)) + " reference");
    if (r.bitwise_devices && !c.device.is_cpu()) {
      Tensor cpu = run(r, leaves(r, rounded, kCPU, c.dtype, false), {kCPU, c.dtype});
      expect_matches(out, cpu, c.dtype, 0, true, r.name + " on " + c.device.str() + " vs the CPU, bit for bit");
    }
  }
  if (r.check) {
    Inputs in64;
    for (const Tensor& t : rounded) in64.push_back(is_floating(t.dtype()) ? t.to(DType::f64) : t);
    r.check(in64, out.detach().cpu().to(DType::f64));
  }
}

TEST_P(OpTableGradTest, Backward) {
  const Case& c = GetParam();
  const OpRow& r = *c.row;
  std::string why;
  if (skip_reason(c.device, &why)) GTEST_SKIP() << why;
  Inputs rounded = rounded_inputs(r, c.dtype);
  Inputs xd = leaves(r, rounded, c.device, c.dtype, true);
  Inputs xr = leaves(r, rounded, kCPU, DType::f64, true);
  Tensor out = run(r, xd, {c.device, c.dtype});
  Tensor ref = run(r, xr, {kCPU, DType::f64});
  ASSERT_TRUE(out.requires_grad()) << "the output does not require grad";
  Generator g(name_seed(r.name, 99));
  Tensor w = rand(out.shape(), DType::f64, kCPU, &g, 0.5, 1.5).to(out.dtype());  // sum(out * w)
  out.backward(w.to(c.device));
  ref.backward(w.to(DType::f64));
  for (size_t k = 0; k < xd.size(); ++k) {
    if (!xd[k].requires_grad()) continue;
    Tensor gd = xd[k].grad(), gr = xr[k].grad();
    ASSERT_TRUE(gd.defined()) << "input " << k << " received no gradient";
    ASSERT_TRUE(gr.defined()) << "input " << k << " received no gradient in the reference";
    EXPECT_EQ(gd.device(), c.device);
    EXPECT_EQ(gd.dtype(), c.dtype) << "input " << k << "'s gradient dtype";
    expect_matches(gd, gr, c.dtype, r.grad_tol, false,
                   r.name + " gradient of input " + std::to_string(k) + " vs the CPU f64 reference");
  }
}

TEST_P(OpTableGradcheck, FiniteDifferences) {
  const OpRow& r = *GetParam().row;
  Inputs x = leaves(r, rounded_inputs(r, DType::f64), kCPU, DType::f64, true);
  const OpRow* rp = &r;
  volt::testing::expect_gradients_match([rp](const Inputs& in) { return run(*rp, in, {kCPU, DType::f64}); }, x,
                                        1e-6, r.gc_atol, r.gc_rtol);
}

class OpTableDoubleBackward : public ::testing::TestWithParam<Case> {};

TEST_P(OpTableDoubleBackward, FiniteDifferences) {
  const OpRow& r = *GetParam().row;
  if (!r.double_backward) GTEST_SKIP() << r.name << ": first derivatives only: " << r.first_order_reason;
  Inputs x = leaves(r, rounded_inputs(r, DType::f64), kCPU, DType::f64, true);
  const OpRow* rp = &r;
  volt::testing::expect_second_derivatives_match([rp](const Inputs& in) { return run(*rp, in, {kCPU, DType::f64}); },
                                                 x, 1e-6, r.gc_atol, r.gc_rtol);
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableTest, ::testing::ValuesIn(all_cases(false)), case_name);
INSTANTIATE_TEST_SUITE_P(OpTable, OpTableGradTest, ::testing::ValuesIn(all_cases(true)), case_name);
INSTANTIATE_TEST_SUITE_P(OpTable, OpTableGradcheck, ::testing::ValuesIn(gradcheck_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.row->name; });
INSTANTIATE_TEST_SUITE_P(OpTable, OpTableDoubleBackward, ::testing::ValuesIn(gradcheck_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.row->name; });

}  // namespace
}  // namespace volt::optable
