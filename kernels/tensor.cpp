#include <volt/kernels/tensor.h>

#include <cstring>
#include <sstream>

#include <volt/runtime/allocator.h>
#include <volt/kernels/autograd.h>
#include <volt/kernels/graph.h>
#include <volt/runtime/cuda_api.h>

namespace volt {

namespace {
const TensorImpl& need(const std::shared_ptr<TensorImpl>& impl, const char* what) {
  VOLT_CHECK(impl != nullptr, "Tensor::", what, ": the tensor is undefined (default-constructed)");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const { return need(impl_, "shape").shape; }
const Shape& Tensor::strides() const { return need(impl_, "strides").strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "Tensor::stride")]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
int64_t Tensor::offset() const { return need(impl_, "offset").offset; }
DType Tensor::dtype() const { return need(impl_, "dtype").dtype; }
Device Tensor::device() const { return need(impl_, "device").storage->device; }
const std::shared_ptr<Storage>& Tensor::storage() const { return need(impl_, "storage").storage; }
std::string Tensor::shape_str() const { return shape_to_string(shape()); }

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sh[i] != 1 && st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& impl = need(impl_, "data_ptr");
  if (!impl.storage->data && impl.storage->nbytes > 0)
    VOLT_FAIL("Tensor::data_ptr: storage released: an FSDP-sharded parameter outside its unit's forward/backward; "
              "the tensor ", shape_to_string(impl.shape), " ", dtype_name(impl.dtype), " views a storage of ",
              impl.storage->nbytes, " bytes whose data is freed between uses. Read it through the module's call "
              "(nn::Module::call_scoped), or gather it first (Strategy::module_state_dict, FSDPStrategy::FullParams)");
  return static_cast<char*>(impl.storage->data.get()) + impl.offset * static_cast<int64_t>(itemsize(impl.dtype));
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) overflow |= __builtin_mul_overflow(n, s, &n);
  if (overflow) {  // zero elements if any size is 0 (the product of the others may not fit), else too many
    for (int64_t s : shape)
      if (s == 0) return 0;
    VOLT_FAIL("shape ", shape_to_string(shape), " has more than 2^63 elements");
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // scalars accept dim 0 / -1
  VOLT_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
             " dimension(s); expected a dim in [", -n, ", ", n - 1, "]");
  return dim < 0 ? dim + n : dim;
}

static void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape)
    VOLT_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_to_string(shape));
}

// Sizes must be non-negative, and the byte size (and the contiguous strides, which skip size-0 dims) must fit
// in int64: a shape read from a file can be anything.
static void check_shape(const Shape& shape, DType dtype, const char* op) {
  int64_t bytes = static_cast<int64_t>(itemsize(dtype));
  for (int64_t s : shape) {
    VOLT_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_to_string(shape));
    VOLT_CHECK(!__builtin_mul_overflow(bytes, std::max<int64_t>(s, 1), &bytes), op, ": shape ",
               shape_to_string(shape), " of ", dtype_name(dtype), " is too large (more than 2^63 bytes)");
  }
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, dtype, "empty");
  check_device_usable(device, "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::create(device, static_cast<size_t>(shape_numel(shape)) * itemsize(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  check_shape(shape, dtype, "empty_pinned");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::create_pinned(static_cast<size_t>(shape_numel(shape)) * itemsize(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  VOLT_ASSERT(shape.size() == strides.size(), "make_view: shape/stride rank mismatch");
  check_shape(shape, "make_view");
  int64_t lo = offset, hi = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) { hi = lo - 1; break; }
    int64_t ext = (shape[i] - 1) * strides[i];
    if (ext < 0) lo += ext; else hi += ext;
  }
  int64_t cap = static_cast<int64_t>(base.storage()->nbytes / itemsize(base.dtype()));
  VOLT_CHECK(hi < lo || (lo >= 0 && hi < cap), "make_view: view ", shape_to_string(shape), " at offset ",
             offset, " reaches outside its storage of ", cap, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor from_blob(const void* host_data, const Shape& shape, DType dtype, Device device) {
  // A CUDA capture cannot take a synchronous copy from host memory (a CPU capture copies now: a constant).
  if (device.is_cuda()) Graph::check_not_capturing(device, "from_blob (a tensor made from host memory)");
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() > 0) copy_bytes(t.data_ptr(), device, host_data, kCPU, t.nbytes());
  return t;
}


}  // namespace volt
