#pragma once
#include <cstdint>
#include <string>

namespace volt {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  ///< GPU ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // "cpu", "cuda", "cuda:1", "gpu", "gpu:0". Throws volt::Error on anything else.
  Device(const std::string& spec);  // NOLINT: implicit on purpose, t.to("cuda:0")
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, index); }

}  // namespace volt
