#include <volt/runtime/device.h>

#include <cctype>

#include <volt/runtime/error.h>

namespace volt {

Device::Device(const std::string& spec) {
  auto fail = [&] {
    VOLT_FAIL("Device: cannot parse '", spec, "'; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0");
  };
  if (spec == "cpu") { type = DeviceType::CPU; index = 0; return; }
  std::string head = spec.substr(0, spec.find(':'));
  if (head != "cuda" && head != "gpu") fail();
  type = DeviceType::CUDA;
  index = 0;
  if (spec.size() > head.size()) {
    std::string num = spec.substr(head.size() + 1);
    if (num.empty() || num.size() > 6) fail();
    for (char c : num) if (!std::isdigit(static_cast<unsigned char>(c))) fail();
    index = std::stoi(num);
  }
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace volt
