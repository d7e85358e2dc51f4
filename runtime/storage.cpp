#include <volt/runtime/storage.h>

#include <volt/runtime/allocator.h>

namespace volt {

std::shared_ptr<Storage> Storage::create(Device device, size_t nbytes) {
  auto s = std::make_shared<Storage>();
  s->data = allocate(device, nbytes);
  s->nbytes = nbytes;
  s->device = device;
  return s;
}

std::shared_ptr<Storage> Storage::create_pinned(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  bool pinned = false;
  s->data = allocate_pinned(nbytes, &pinned);
  s->nbytes = nbytes;
  s->device = kCPU;
  s->pinned = pinned;
  return s;
}

}  // namespace volt
