#include <volt/trainer/precision/precision.h>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/error.h>

namespace volt {

Precision parse_precision(const std::string& s) {
  if (s == "32-true" || s == "32") return Precision::f32_true;
  if (s == "64-true" || s == "64") return Precision::f64_true;
  if (s == "16-mixed" || s == "16") return Precision::f16_mixed;
  if (s == "bf16-mixed" || s == "bf16") return Precision::bf16_mixed;
  if (s == "16-true") return Precision::f16_true;
  if (s == "bf16-true") return Precision::bf16_true;
  VOLT_FAIL("precision=\"", s, "\" is not supported; expected one of \"32-true\", \"16-mixed\", \"bf16-mixed\", "
            "\"16-true\", \"bf16-true\", \"64-true\" (or the legacy spellings \"32\", \"16\", \"bf16\", \"64\")");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32_true: return "32-true";
    case Precision::f64_true: return "64-true";
    case Precision::f16_mixed: return "16-mixed";
    case Precision::bf16_mixed: return "bf16-mixed";
    case Precision::f16_true: return "16-true";
    case Precision::bf16_true: return "bf16-true";
  }
  return "32-true";
}

DType precision_param_dtype(Precision p) {
  switch (p) {
    case Precision::f64_true: return DType::f64;
    case Precision::f16_true: return DType::f16;
    case Precision::bf16_true: return DType::bf16;
    default: return DType::f32;
  }
}

DType precision_autocast_dtype(Precision p) { return p == Precision::f16_mixed ? DType::f16 : DType::bf16; }

void check_precision_supported(Precision p, Device device) {
  if (!device.is_cuda()) return;
  const bool bf16 = p == Precision::bf16_mixed || p == Precision::bf16_true;
  if (!bf16) return;
  const int cc = cuda_compute_capability(device.index);
  VOLT_CHECK(cc >= 80, "Trainer: precision=\"", precision_name(p), "\" needs bfloat16 support, but GPU ",
             device.index, " has compute capability ", cc / 10, ".", cc % 10, " (bf16 needs 8.0 or newer); use ",
             "precision=\"16-mixed\" on this GPU");
}

}  // namespace volt
