#include <volt/runtime/autocast.h>

#include <volt/runtime/error.h>

namespace volt {

namespace {
thread_local AutocastState t_state;
}

AutocastState autocast_state() { return t_state; }

AutocastGuard::AutocastGuard(bool enabled, DType dtype) : prev_(t_state) {
  VOLT_CHECK(dtype == DType::f16 || dtype == DType::bf16, "autocast: dtype ", dtype_name(dtype),
             " is not a lower-precision floating type; expected f16 or bf16");
  t_state = AutocastState{enabled, dtype};
}

AutocastGuard::~AutocastGuard() { t_state = prev_; }

}  // namespace volt
