#pragma once
#include <cstddef>
#include <memory>

#include <volt/runtime/device.h>

namespace volt {

/// A flat, reference-counted buffer of bytes on one device. Tensors (and their views) share it.
struct Storage {
  std::shared_ptr<void> data;
  size_t nbytes = 0;
  Device device;
  bool pinned = false;  ///< page-locked host memory

  static std::shared_ptr<Storage> create(Device device, size_t nbytes);
  static std::shared_ptr<Storage> create_pinned(size_t nbytes);
};

}  // namespace volt
